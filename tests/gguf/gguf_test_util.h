// Helpers for the gguf tests: temporary files and byte patching of serialised GGUF files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"

namespace squeeze::gguf::testing {

using Bytes = std::vector<uint8_t>;

// A file path unique to the running test, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(std::string_view suffix = "") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("sq_gguf_") + info->test_suite_name() + "_" + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = (std::filesystem::path(::testing::TempDir()) / (name + std::string(suffix) + ".gguf")).string();
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  const std::string& path() const { return path_; }

  void write(const Bytes& bytes) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << "cannot write " << path_;
  }

 private:
  std::string path_;
};

// Offset of the first occurrence of `needle` in `bytes`; fails the test when absent.
inline size_t find_bytes(const Bytes& bytes, std::string_view needle, size_t from = 0) {
  for (size_t i = from; i + needle.size() <= bytes.size(); ++i) {
    if (std::memcmp(bytes.data() + i, needle.data(), needle.size()) == 0) return i;
  }
  ADD_FAILURE() << "'" << needle << "' not found in the serialised file";
  return 0;
}

template <typename T>
void poke(Bytes& bytes, size_t pos, T v) {
  ASSERT_LE(pos + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + pos, &v, sizeof(T));
}

template <typename T>
T peek(const Bytes& bytes, size_t pos) {
  T v{};
  std::memcpy(&v, bytes.data() + pos, sizeof(T));
  return v;
}

// Offset just past a key (or tensor name) string in the file: where its type id (or n_dims)
// is. Looks for the 8-byte length followed by the text, so a key is not confused with a value.
inline size_t after_string(const Bytes& bytes, std::string_view s) {
  std::string encoded(8, '\0');
  const uint64_t n = s.size();
  std::memcpy(encoded.data(), &n, 8);
  encoded += s;
  return find_bytes(bytes, encoded) + encoded.size();
}

// Where the fields of a tensor's info record are.
struct TensorInfoPos {
  size_t n_dims;
  size_t dims;    // first int64 dimension
  size_t type;    // valid for the dims the writer wrote
  size_t offset;
};

inline TensorInfoPos tensor_info_pos(const Bytes& bytes, std::string_view name) {
  TensorInfoPos p{};
  p.n_dims = after_string(bytes, name);
  p.dims = p.n_dims + 4;
  p.type = p.dims + 8 * peek<uint32_t>(bytes, p.n_dims);
  p.offset = p.type + 4;
  return p;
}

// Writes `bytes`, opens it and returns the FormatError's message ("" and a test failure when
// it opens fine or throws anything else).
inline std::string open_error(const Bytes& bytes, const TempFile& file) {
  file.write(bytes);
  try {
    File::open(file.path());
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    if (std::getenv("SQ_PRINT_ERRORS") != nullptr) std::cerr << "  " << msg << "\n";
    EXPECT_NE(msg.find(file.path()), std::string::npos) << "message does not name the file: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected FormatError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected FormatError, but the file opened";
  return "";
}

inline std::vector<uint8_t> iota_bytes(size_t n, uint8_t start = 0) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + i * 7);
  return v;
}

}  // namespace squeeze::gguf::testing
