// Private to gguf/: a bounds-checked cursor over the mapped file and metadata value parsing.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "gguf/gguf.h"

namespace squeeze::gguf::detail {

static_assert(std::endian::native == std::endian::little, "GGUF reading assumes a little-endian host");

// Throws FormatError("<path>: <what>").
[[noreturn]] void fail(const std::string& path, const std::string& what);

bool value_type_known(uint32_t id);
bool value_type_is_integer(ValueType t);

// Reads forward through [data, data + size). Every read checks the remaining length first, so a
// corrupt length can never read past the end or make a large allocation.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, size_t pos, const std::string& path)
      : data_(data), size_(size), pos_(pos), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const std::string& path() const { return path_; }
  [[noreturn]] void fail(const std::string& what) const { detail::fail(path_, what); }

  // Returns a pointer to the next n bytes and moves past them.
  const uint8_t* take(uint64_t n, std::string_view what) {
    if (n > remaining()) {
      fail("file is truncated: " + std::string(what) + " at offset " + std::to_string(pos_) +
           " needs " + std::to_string(n) + " bytes, only " + std::to_string(remaining()) +
           " left");
    }
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }

  template <typename T>
  T read(std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }

  // A GGUF string: uint64 length, then that many bytes (not NUL-terminated).
  std::string_view read_string(std::string_view what) {
    const uint64_t n = read<uint64_t>(what);
    if (n > remaining()) {
      fail("file is truncated or corrupt: " + std::string(what) + " at offset " +
           std::to_string(pos_ - 8) + " claims " + std::to_string(n) + " bytes, only " +
           std::to_string(remaining()) + " left");
    }
    const uint8_t* p = take(n, what);
    return {reinterpret_cast<const char*>(p), static_cast<size_t>(n)};
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_;
  const std::string& path_;
};

// Parses one metadata value of type `type_id` (already read) for `key`.
Value parse_value(Cursor& cur, uint32_t type_id, std::string_view key);

}  // namespace squeeze::gguf::detail
