// Private to gguf/: the state behind gguf::File.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf.h"

namespace squeeze::gguf {

// A read-only private mapping of a whole file; unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  // Throws FormatError naming `path` when the file cannot be opened, is not a regular file,
  // or cannot be mapped.
  explicit Mapping(const std::string& path);
  // Holds a copy of `bytes` instead of a mapping (File::from_bytes). Empty bytes throw, as an
  // empty file does.
  Mapping(const std::string& path, std::span<const uint8_t> bytes);
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::vector<uint8_t> owned_;  // from_bytes: the copy data_ points into (else empty)
};

namespace detail {

// Everything File knows about an open file. (File::Impl is private to File; the parsing
// functions work on this base.)
struct FileData {
  std::string path;
  Mapping map;
  uint32_t version = 0;
  uint64_t alignment = 32;  // GGUF default when general.alignment is absent
  uint64_t data_offset = 0;
  std::vector<KeyValue> metadata;
  std::vector<TensorInfo> tensors;
  // Keys and names are views into the mapping, which outlives both maps.
  std::unordered_map<std::string_view, size_t> key_index;
  std::unordered_map<std::string_view, size_t> tensor_index;

  explicit FileData(const std::string& p) : path(p), map(p) {}
  FileData(const std::string& p, std::span<const uint8_t> bytes) : path(p), map(p, bytes) {}
  [[noreturn]] void fail(const std::string& what) const;
};

}  // namespace detail

struct File::Impl : detail::FileData {
  using FileData::FileData;
};

}  // namespace squeeze::gguf
