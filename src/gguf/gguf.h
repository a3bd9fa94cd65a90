// GGUF v3: read-only memory-mapped reader (validated before use) and a writer.
//
// Layout reference: ggml's docs/gguf.md. Tensor shapes are in ggml order:
// shape[0] is the row length (contiguous), shape[1] the number of rows, ...
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/atomic_file.h"
#include "formats/format.h"

namespace squeeze::gguf {

enum class ValueType : uint32_t {
  UInt8 = 0, Int8 = 1, UInt16 = 2, Int16 = 3, UInt32 = 4, Int32 = 5, Float32 = 6,
  Bool = 7, String = 8, Array = 9, UInt64 = 10, Int64 = 11, Float64 = 12,
};
std::string_view value_type_name(ValueType t);
// Bytes of one element of a numeric or bool value type; 0 for String and Array.
size_t value_type_size(ValueType t);

// One metadata value. Strings and array payloads point into the mapped file.
struct Value {
  ValueType type = ValueType::UInt8;
  // Scalars (set according to type; integers also fill the other integer field when in range).
  uint64_t u64 = 0;
  int64_t i64 = 0;
  double f64 = 0;
  bool b = false;
  std::string_view str;
  // Arrays (type == Array).
  ValueType array_type = ValueType::UInt8;
  uint64_t array_len = 0;
  const uint8_t* array_data = nullptr;     // numeric arrays: packed little-endian elements
  std::vector<std::string_view> strings;   // string arrays
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  formats::DType type;         // may be a format squeeze cannot run: check format_info(type).supported
  std::vector<int64_t> shape;  // ggml order, 1..4 dims
  int64_t n_elements = 0;
  uint64_t offset = 0;         // relative to the start of the data section
  size_t n_bytes = 0;
  const void* data = nullptr;  // inside the mapping
};

class File {
 public:
  // Maps and validates the whole file: magic, version (3; 2 also read), counts, every string and
  // array length, value types, tensor dims and element counts (overflow), tensor types, alignment,
  // and that each tensor's data lies inside the file. Throws FormatError with a clear message.
  //
  // Rules follow llama.cpp's gguf.cpp: arrays of arrays are rejected, and (stricter) so are
  // bools other than 0/1; general.alignment may be (looser) any integer type holding a power of
  // two <= 2^31; tensor names are at most 63 bytes and unique; 1..4 dims, each >= 0 (0 is
  // allowed, as in ggml); unknown type ids are errors, but formats that squeeze knows and cannot
  // run (FormatInfo::supported == false) are accepted here, so `inspect` can show them: the
  // model loader rejects them. Each tensor's offset must be a multiple of the alignment (ggml
  // also demands they be packed in order; we do not). Messages are one line:
  // "<path>: <what is wrong>".
  static File open(const std::string& path);
  // The same checks on a copy of `bytes` held in memory (fuzzing, tests); `name` stands for the
  // path in messages and path().
  static File from_bytes(const std::string& name, std::span<const uint8_t> bytes);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;
  size_t file_size() const;
  const uint8_t* file_data() const;
  uint64_t data_offset() const;  // start of the tensor data section in the file

  const std::vector<KeyValue>& metadata() const;
  const Value* find(std::string_view key) const;

  // Typed getters. The `require_*` forms throw FormatError naming the key when it is missing
  // or has an incompatible type; the `get_*` forms return nullopt when missing and throw on a
  // wrong type. Integers of any width are accepted when the value fits. The float getters also
  // take integer values; get_float_array takes float32 and float64 arrays.
  int64_t require_int(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  double require_float(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::string_view require_string(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::vector<std::string_view> require_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;    // empty if missing
  std::vector<float> get_float_array(std::string_view key) const;    // empty if missing

  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  struct Impl;
  explicit File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Builds a GGUF v3 file in memory order and writes it through a temporary file renamed at
// the end (no partial output on failure).
//
// Metadata keys keep the order they were first added in; adding a key again replaces its value
// in place. `general.alignment` is owned by the constructor's argument (written when it is not
// the default 32) and cannot be set as a key. Misuse (bad shape, wrong byte count, duplicate
// tensor name, bad alignment) throws squeeze::Error; so does an I/O failure in write().
class Writer {
 public:
  explicit Writer(uint64_t alignment = 32);
  ~Writer();
  Writer(Writer&&) noexcept;
  Writer& operator=(Writer&&) noexcept;

  void add_uint8(std::string key, uint8_t v);
  void add_int8(std::string key, int8_t v);
  void add_uint16(std::string key, uint16_t v);
  void add_int16(std::string key, int16_t v);
  void add_uint32(std::string key, uint32_t v);
  void add_int32(std::string key, int32_t v);
  void add_uint64(std::string key, uint64_t v);
  void add_int64(std::string key, int64_t v);
  void add_float32(std::string key, float v);
  void add_float64(std::string key, double v);
  void add_bool(std::string key, bool v);
  void add_string(std::string key, std::string v);
  void add_string_array(std::string key, std::vector<std::string> v);
  void add_int32_array(std::string key, std::vector<int32_t> v);
  void add_float32_array(std::string key, std::vector<float> v);
  // A numeric (or bool) array of any element type: `packed` holds the little-endian elements.
  void add_array(std::string key, ValueType element_type, std::span<const uint8_t> packed);
  // Any value as read by File (scalars, strings, arrays of any element type).
  void add_value(std::string key, const Value& v);
  // Copies every key of `src` (e.g. when converting a model), except those in `skip` and
  // `general.alignment`.
  void copy_metadata(const File& src, std::span<const std::string_view> skip = {});
  // Tensor data is copied into the writer; bytes must equal row_bytes * rows for type/shape.
  void add_tensor(std::string name, formats::DType type, std::vector<int64_t> shape,
                  std::span<const uint8_t> bytes);

  uint64_t alignment() const { return alignment_; }
  size_t n_kv() const;
  size_t n_tensors() const { return tensors_.size(); }

  // Serialised file (for tests that craft or corrupt files).
  std::vector<uint8_t> to_bytes() const;
  // Writes the file at path through an AtomicFile (never half-written).
  void write(const std::string& path) const;
  // Appends the file to f (the caller commits it).
  void write_to(AtomicFile& f) const;

 private:
  struct Tensor {
    std::string name;
    formats::DType type;
    std::vector<int64_t> shape;  // ggml order
    std::vector<uint8_t> data;
  };
  // Calls out(bytes, n) with the whole file, in order.
  template <typename Out>
  void serialise(Out&& out) const;
  void set_kv(std::string key, std::vector<uint8_t> encoded);  // encoded = type id + value

  uint64_t alignment_;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> kv_;  // key, encoded type+value
  std::vector<Tensor> tensors_;
};

}  // namespace squeeze::gguf
