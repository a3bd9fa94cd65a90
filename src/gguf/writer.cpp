// GGUF v3 writer: metadata of every value type, tensors aligned, written through a temporary
// file that is renamed into place only once everything is on disk (core/atomic_file.h).
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/parse.h"

namespace squeeze::gguf {

namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr size_t kMaxNameBytes = 63;
constexpr std::string_view kAlignmentKey = "general.alignment";

[[noreturn]] void misuse(const std::string& what) { throw Error("gguf writer: " + what); }

// Appends raw bytes. (resize + memcpy rather than insert: GCC 12 at -O2 reports a false
// -Wstringop-overflow for vector::insert of a few bytes.)
void append(std::vector<uint8_t>& buf, const void* p, size_t n) {
  if (n == 0) return;
  const size_t at = buf.size();
  buf.resize(at + n);
  std::memcpy(buf.data() + at, p, n);
}

template <typename T>
void put(std::vector<uint8_t>& buf, T v) {
  append(buf, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& buf, std::string_view s) {
  put<uint64_t>(buf, s.size());
  append(buf, s.data(), s.size());
}

std::vector<uint8_t> encoded_type(ValueType t) {
  std::vector<uint8_t> buf;
  put<uint32_t>(buf, static_cast<uint32_t>(t));
  return buf;
}

template <typename T>
std::vector<uint8_t> encode_scalar(ValueType t, T v) {
  std::vector<uint8_t> buf = encoded_type(t);
  put<T>(buf, v);
  return buf;
}

std::vector<uint8_t> encode_numeric_array(ValueType elem, std::span<const uint8_t> packed) {
  const size_t size = value_type_size(elem);
  if (size == 0) misuse("add_array takes numeric or bool elements, not " + std::string(value_type_name(elem)));
  if (packed.size() % size != 0) {
    misuse("array of " + std::string(value_type_name(elem)) + " has " +
           std::to_string(packed.size()) + " bytes, not a multiple of " + std::to_string(size));
  }
  std::vector<uint8_t> buf = encoded_type(ValueType::Array);
  put<uint32_t>(buf, static_cast<uint32_t>(elem));
  put<uint64_t>(buf, packed.size() / size);
  append(buf, packed.data(), packed.size());
  return buf;
}

std::vector<uint8_t> encode_string_array(std::span<const std::string_view> strings) {
  std::vector<uint8_t> buf = encoded_type(ValueType::Array);
  put<uint32_t>(buf, static_cast<uint32_t>(ValueType::String));
  put<uint64_t>(buf, strings.size());
  for (std::string_view s : strings) put_string(buf, s);
  return buf;
}

uint64_t padding(uint64_t pos, uint64_t alignment) { return (alignment - pos % alignment) % alignment; }

}  // namespace

Writer::Writer(uint64_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (uint64_t{1} << 31)) {
    misuse("alignment " + std::to_string(alignment) + " is not a power of two in [1, 2^31]");
  }
}
Writer::~Writer() = default;
Writer::Writer(Writer&&) noexcept = default;
Writer& Writer::operator=(Writer&&) noexcept = default;

void Writer::set_kv(std::string key, std::vector<uint8_t> encoded) {
  if (key == kAlignmentKey) misuse("set the alignment through the Writer constructor, not as a key");
  const auto it = std::find_if(kv_.begin(), kv_.end(), [&](const auto& kv) { return kv.first == key; });
  if (it != kv_.end()) {
    it->second = std::move(encoded);
  } else {
    kv_.emplace_back(std::move(key), std::move(encoded));
  }
}

size_t Writer::n_kv() const { return kv_.size() + (alignment_ != kDefaultAlignment ? 1 : 0); }

void Writer::add_uint8(std::string k, uint8_t v) { set_kv(std::move(k), encode_scalar(ValueType::UInt8, v)); }
void Writer::add_int8(std::string k, int8_t v) { set_kv(std::move(k), encode_scalar(ValueType::Int8, v)); }
void Writer::add_uint16(std::string k, uint16_t v) { set_kv(std::move(k), encode_scalar(ValueType::UInt16, v)); }
void Writer::add_int16(std::string k, int16_t v) { set_kv(std::move(k), encode_scalar(ValueType::Int16, v)); }
void Writer::add_uint32(std::string k, uint32_t v) { set_kv(std::move(k), encode_scalar(ValueType::UInt32, v)); }
void Writer::add_int32(std::string k, int32_t v) { set_kv(std::move(k), encode_scalar(ValueType::Int32, v)); }
void Writer::add_uint64(std::string k, uint64_t v) { set_kv(std::move(k), encode_scalar(ValueType::UInt64, v)); }
void Writer::add_int64(std::string k, int64_t v) { set_kv(std::move(k), encode_scalar(ValueType::Int64, v)); }
void Writer::add_float32(std::string k, float v) { set_kv(std::move(k), encode_scalar(ValueType::Float32, v)); }
void Writer::add_float64(std::string k, double v) { set_kv(std::move(k), encode_scalar(ValueType::Float64, v)); }
void Writer::add_bool(std::string k, bool v) {
  set_kv(std::move(k), encode_scalar<uint8_t>(ValueType::Bool, v ? 1 : 0));
}

void Writer::add_string(std::string key, std::string v) {
  std::vector<uint8_t> buf = encoded_type(ValueType::String);
  put_string(buf, v);
  set_kv(std::move(key), std::move(buf));
}

void Writer::add_string_array(std::string key, std::vector<std::string> v) {
  const std::vector<std::string_view> views(v.begin(), v.end());
  set_kv(std::move(key), encode_string_array(views));
}

void Writer::add_int32_array(std::string key, std::vector<int32_t> v) {
  const auto bytes = std::as_bytes(std::span<const int32_t>(v));
  add_array(std::move(key), ValueType::Int32,
            {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

void Writer::add_float32_array(std::string key, std::vector<float> v) {
  const auto bytes = std::as_bytes(std::span<const float>(v));
  add_array(std::move(key), ValueType::Float32,
            {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

void Writer::add_array(std::string key, ValueType element_type, std::span<const uint8_t> packed) {
  if (element_type == ValueType::Bool &&
      std::any_of(packed.begin(), packed.end(), [](uint8_t b) { return b > 1; })) {
    misuse("bool array '" + key + "' holds a byte other than 0 or 1");
  }
  set_kv(std::move(key), encode_numeric_array(element_type, packed));
}

void Writer::add_value(std::string key, const Value& v) {
  switch (v.type) {
    case ValueType::UInt8: add_uint8(std::move(key), static_cast<uint8_t>(v.u64)); break;
    case ValueType::Int8: add_int8(std::move(key), static_cast<int8_t>(v.i64)); break;
    case ValueType::UInt16: add_uint16(std::move(key), static_cast<uint16_t>(v.u64)); break;
    case ValueType::Int16: add_int16(std::move(key), static_cast<int16_t>(v.i64)); break;
    case ValueType::UInt32: add_uint32(std::move(key), static_cast<uint32_t>(v.u64)); break;
    case ValueType::Int32: add_int32(std::move(key), static_cast<int32_t>(v.i64)); break;
    case ValueType::UInt64: add_uint64(std::move(key), v.u64); break;
    case ValueType::Int64: add_int64(std::move(key), v.i64); break;
    case ValueType::Float32: add_float32(std::move(key), static_cast<float>(v.f64)); break;
    case ValueType::Float64: add_float64(std::move(key), v.f64); break;
    case ValueType::Bool: add_bool(std::move(key), v.b); break;
    case ValueType::String: {
      std::vector<uint8_t> buf = encoded_type(ValueType::String);
      put_string(buf, v.str);
      set_kv(std::move(key), std::move(buf));
      break;
    }
    case ValueType::Array:
      if (v.array_type == ValueType::String) {
        set_kv(std::move(key), encode_string_array(v.strings));
      } else {
        const size_t n = static_cast<size_t>(v.array_len) * value_type_size(v.array_type);
        add_array(std::move(key), v.array_type, {v.array_data, n});
      }
      break;
  }
}

void Writer::copy_metadata(const File& src, std::span<const std::string_view> skip) {
  for (const KeyValue& kv : src.metadata()) {
    if (kv.key == kAlignmentKey || std::find(skip.begin(), skip.end(), kv.key) != skip.end()) continue;
    add_value(kv.key, kv.value);
  }
}

void Writer::add_tensor(std::string name, formats::DType type, std::vector<int64_t> shape,
                        std::span<const uint8_t> bytes) {
  if (name.size() > kMaxNameBytes) misuse("tensor name '" + name + "' is longer than 63 bytes");
  if (std::any_of(tensors_.begin(), tensors_.end(), [&](const Tensor& t) { return t.name == name; })) {
    misuse("duplicate tensor name '" + name + "'");
  }
  if (shape.empty() || shape.size() > 4) misuse("tensor '" + name + "' must have 1 to 4 dimensions");
  const formats::FormatInfo& info = formats::format_info(type);
  int64_t rows = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) misuse("tensor '" + name + "' has a negative dimension");
    if (d > 0 && __builtin_mul_overflow(rows, shape[d], &rows)) {
      misuse("tensor '" + name + "' has too many elements");
    }
  }
  if (shape[0] % info.block_size != 0) {
    misuse("tensor '" + name + "' row length " + std::to_string(shape[0]) +
           " is not a multiple of the " + std::string(info.name) + " block size");
  }
  const size_t expected = formats::row_bytes(type, shape[0]) * static_cast<size_t>(rows);
  if (bytes.size() != expected) {
    misuse("tensor '" + name + "' has " + std::to_string(bytes.size()) + " bytes, expected " +
           std::to_string(expected));
  }
  tensors_.push_back(Tensor{std::move(name), type, std::move(shape), {bytes.begin(), bytes.end()}});
}

template <typename Out>
void Writer::serialise(Out&& out) const {
  std::vector<uint8_t> head;
  append(head, "GGUF", 4);
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, n_kv());
  if (alignment_ != kDefaultAlignment) {
    put_string(head, kAlignmentKey);
    const auto v = encode_scalar(ValueType::UInt32, static_cast<uint32_t>(alignment_));
    append(head, v.data(), v.size());
  }
  for (const auto& [key, value] : kv_) {
    put_string(head, key);
    append(head, value.data(), value.size());
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) put<int64_t>(head, d);
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    offset += t.data.size() + padding(t.data.size(), alignment_);
  }
  head.resize(head.size() + padding(head.size(), alignment_), 0);
  out(head.data(), head.size());

  const std::vector<uint8_t> zeros(alignment_, 0);
  for (const Tensor& t : tensors_) {
    out(t.data.data(), t.data.size());
    out(zeros.data(), padding(t.data.size(), alignment_));
  }
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> bytes;
  serialise([&](const uint8_t* p, size_t n) { append(bytes, p, n); });
  return bytes;
}

void Writer::write(const std::string& path) const {
  AtomicFile f(path);
  write_to(f);
  f.commit();
}

void Writer::write_to(AtomicFile& f) const {
  serialise([&](const uint8_t* p, size_t n) { f.write(p, n); });
}

}  // namespace squeeze::gguf
