// Malformed files: each must give a FormatError naming the file and the problem, never a crash
// (run these under ASan/UBSan too).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <random>

#include "gguf_test_util.h"

namespace squeeze::gguf {
namespace {

using formats::DType;
using testing::Bytes;
using testing::open_error;
using testing::peek;
using testing::poke;
using testing::TempFile;
using ::testing::HasSubstr;

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

// A small valid file with a bit of everything. Tensor names "tok.weight" and "out.weight" have
// the same length, as do keys "dup.a" and "dup.b", so tests can patch one into the other.
Bytes valid_file() {
  Writer w;
  w.add_string("general.architecture", "llama");
  w.add_uint32("llama.block_count", 2);
  w.add_uint32("dup.a", 1);
  w.add_uint32("dup.b", 2);
  w.add_bool("flag", true);
  w.add_string_array("strs", {"x", "yy"});
  w.add_int32_array("ints", {1, 2, 3});
  w.add_tensor("tok.weight", DType::F32, {8, 2}, testing::iota_bytes(64));
  w.add_tensor("out.weight", DType::Q8_0, {64, 1}, testing::iota_bytes(68));
  w.add_tensor(std::string(63, 'n'), DType::F16, {4}, testing::iota_bytes(8));
  return w.to_bytes();
}

class GgufCorrupt : public ::testing::Test {
 protected:
  std::string error(const Bytes& bytes) { return open_error(bytes, file_); }
  Bytes bytes_ = valid_file();
  TempFile file_;
};

TEST_F(GgufCorrupt, TheBaseFileIsValid) {
  file_.write(bytes_);
  const File f = File::open(file_.path());
  EXPECT_EQ(f.tensors().size(), 3u);
}

TEST_F(GgufCorrupt, TruncatedAtEveryLength) {
  file_.write(bytes_);
  size_t data_end = 0;  // past this, only the last tensor's padding is cut
  {
    const File f = File::open(file_.path());
    for (const TensorInfo& t : f.tensors()) {
      data_end = std::max<size_t>(data_end, f.data_offset() + t.offset + t.n_bytes);
    }
  }
  ASSERT_LT(data_end, bytes_.size());
  for (size_t cut = 0; cut < bytes_.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(bytes_.size()));
    const Bytes part(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(cut));
    if (cut >= data_end) {
      file_.write(part);
      EXPECT_NO_THROW(File::open(file_.path()));
      continue;
    }
    const std::string msg = error(part);
    if (cut == 0) {
      EXPECT_THAT(msg, HasSubstr("empty"));
    } else if (cut < 4) {
      EXPECT_THAT(msg, HasSubstr("bad magic"));
    } else {
      EXPECT_THAT(msg, HasSubstr("truncated"));
    }
  }
}

TEST_F(GgufCorrupt, BadMagic) {
  bytes_[0] = 'X';
  EXPECT_THAT(error(bytes_), HasSubstr("not a GGUF file (bad magic)"));
}

TEST_F(GgufCorrupt, UnsupportedVersions) {
  poke<uint32_t>(bytes_, 4, 1);
  EXPECT_THAT(error(bytes_), HasSubstr("unsupported GGUF version 1"));
  poke<uint32_t>(bytes_, 4, 4);
  EXPECT_THAT(error(bytes_), HasSubstr("unsupported GGUF version 4"));
  poke<uint32_t>(bytes_, 4, 0x03000000);
  EXPECT_THAT(error(bytes_), HasSubstr("big-endian"));
}

TEST_F(GgufCorrupt, AbsurdCounts) {
  Bytes b = bytes_;
  poke<uint64_t>(b, 8, uint64_t{1} << 62);
  EXPECT_THAT(error(b), HasSubstr("more than the"));
  b = bytes_;
  poke<uint64_t>(b, 16, kU64Max);
  EXPECT_THAT(error(b), HasSubstr("metadata keys"));
  b = bytes_;
  poke<uint64_t>(b, 16, peek<uint64_t>(b, 16) + 1);  // one key too many: reads a tensor as a key
  error(b);
}

TEST_F(GgufCorrupt, AbsurdStringLengths) {
  const size_t key_end = testing::after_string(bytes_, "general.architecture");
  Bytes b = bytes_;
  poke<uint64_t>(b, key_end - 20 - 8, uint64_t{1} << 62);  // the key's own length
  EXPECT_THAT(error(b), HasSubstr("claims 4611686018427387904 bytes"));
  b = bytes_;
  poke<uint64_t>(b, key_end + 4, kU64Max);  // the value's length
  EXPECT_THAT(error(b), HasSubstr("value of key 'general.architecture'"));
  b = bytes_;
  poke<uint64_t>(b, testing::after_string(bytes_, "x"), kU64Max - 3);  // an array element
  EXPECT_THAT(error(b), HasSubstr("string in array of key 'strs'"));
}

TEST_F(GgufCorrupt, AbsurdArrayLengths) {
  Bytes b = bytes_;
  poke<uint64_t>(b, testing::after_string(bytes_, "ints") + 8, uint64_t{1} << 61);
  EXPECT_THAT(error(b), HasSubstr("key 'ints' claims 2305843009213693952 elements of int32"));
  b = bytes_;
  poke<uint64_t>(b, testing::after_string(bytes_, "strs") + 8, kU64Max);
  EXPECT_THAT(error(b), HasSubstr("key 'strs' claims 18446744073709551615 strings"));
}

TEST_F(GgufCorrupt, BadValueTypes) {
  Bytes b = bytes_;
  poke<uint32_t>(b, testing::after_string(bytes_, "llama.block_count"), 13);
  EXPECT_THAT(error(b), HasSubstr("key 'llama.block_count' has unknown value type 13"));
  b = bytes_;
  poke<uint32_t>(b, testing::after_string(bytes_, "ints") + 4, 9);
  EXPECT_THAT(error(b), HasSubstr("key 'ints' is an array of arrays"));
  b = bytes_;
  poke<uint32_t>(b, testing::after_string(bytes_, "ints") + 4, 77);
  EXPECT_THAT(error(b), HasSubstr("key 'ints' is an array of unknown value type 77"));
  b = bytes_;
  poke<uint8_t>(b, testing::after_string(bytes_, "flag") + 4, 2);
  EXPECT_THAT(error(b), HasSubstr("key 'flag' has invalid bool value 2"));
}

TEST_F(GgufCorrupt, DuplicateKey) {
  bytes_[testing::find_bytes(bytes_, "dup.b") + 4] = 'a';
  EXPECT_THAT(error(bytes_), HasSubstr("duplicate metadata key 'dup.a'"));
}

TEST_F(GgufCorrupt, DuplicateTensorName) {
  const size_t pos = testing::after_string(bytes_, "out.weight") - 10;
  bytes_[pos] = 't';
  bytes_[pos + 1] = 'o';
  bytes_[pos + 2] = 'k';
  EXPECT_THAT(error(bytes_), HasSubstr("duplicate tensor name 'tok.weight'"));
}

TEST_F(GgufCorrupt, TensorNameTooLong) {
  poke<uint64_t>(bytes_, testing::after_string(bytes_, std::string(63, 'n')) - 63 - 8, 64);
  EXPECT_THAT(error(bytes_), HasSubstr("too long"));
}

TEST_F(GgufCorrupt, BadDimensionCounts) {
  const auto pos = testing::tensor_info_pos(bytes_, "tok.weight");
  Bytes b = bytes_;
  poke<uint32_t>(b, pos.n_dims, 5);
  EXPECT_THAT(error(b), HasSubstr("tensor 'tok.weight' has 5 dimensions; 1 to 4 are allowed"));
  b = bytes_;
  poke<uint32_t>(b, pos.n_dims, 0);
  EXPECT_THAT(error(b), HasSubstr("has 0 dimensions"));
  b = bytes_;
  poke<uint32_t>(b, pos.n_dims, 0xFFFFFFFF);
  EXPECT_THAT(error(b), HasSubstr("4294967295 dimensions"));
}

TEST_F(GgufCorrupt, BadDimensions) {
  const auto pos = testing::tensor_info_pos(bytes_, "tok.weight");
  Bytes b = bytes_;
  poke<int64_t>(b, pos.dims, -8);
  EXPECT_THAT(error(b), HasSubstr("tensor 'tok.weight' has negative dimension 0 (-8)"));
  b = bytes_;
  poke<int64_t>(b, pos.dims, int64_t{1} << 32);
  poke<int64_t>(b, pos.dims + 8, int64_t{1} << 32);
  EXPECT_THAT(error(b), HasSubstr("tensor 'tok.weight' has too many elements"));
  b = bytes_;
  poke<int64_t>(b, pos.dims, std::numeric_limits<int64_t>::max());
  poke<int64_t>(b, pos.dims + 8, 2);
  EXPECT_THAT(error(b), HasSubstr("too many elements"));
  b = bytes_;  // 2^62 f32 elements fit in int64 but their 2^64 bytes do not fit in size_t
  poke<int64_t>(b, pos.dims, int64_t{1} << 31);
  poke<int64_t>(b, pos.dims + 8, int64_t{1} << 31);
  EXPECT_THAT(error(b), HasSubstr("byte size that overflows"));
  b = bytes_;  // 2^62 bytes: representable, but far past the end of the file
  poke<int64_t>(b, pos.dims, int64_t{1} << 40);
  poke<int64_t>(b, pos.dims + 8, int64_t{1} << 20);
  EXPECT_THAT(error(b), HasSubstr("tensor 'tok.weight' data ends past the end of the file (truncated?)"));
}

TEST_F(GgufCorrupt, UnknownTensorType) {
  poke<uint32_t>(bytes_, testing::tensor_info_pos(bytes_, "tok.weight").type, 99);
  EXPECT_THAT(error(bytes_), HasSubstr("tensor 'tok.weight' has unknown type id 99"));
  poke<uint32_t>(bytes_, testing::tensor_info_pos(bytes_, "tok.weight").type, 4);  // removed Q4_2
  EXPECT_THAT(error(bytes_), HasSubstr("unknown type id 4"));
}

TEST_F(GgufCorrupt, RowNotAMultipleOfTheBlockSize) {
  poke<int64_t>(bytes_, testing::tensor_info_pos(bytes_, "out.weight").dims, 48);
  EXPECT_THAT(error(bytes_), HasSubstr("tensor 'out.weight' has rows of 48 elements, not a multiple "
                                       "of the q8_0 block size 32"));
}

TEST_F(GgufCorrupt, TensorDataPastTheEnd) {
  const auto pos = testing::tensor_info_pos(bytes_, "out.weight");
  Bytes b = bytes_;
  poke<uint64_t>(b, pos.offset, uint64_t{1} << 20);
  EXPECT_THAT(error(b), HasSubstr("tensor 'out.weight' data ends past the end of the file (truncated?)"));
  b = bytes_;
  poke<uint64_t>(b, pos.offset, kU64Max - 31);  // aligned, and overflows any naive sum
  EXPECT_THAT(error(b), HasSubstr("data ends past the end"));
  b = bytes_;
  poke<int64_t>(b, testing::tensor_info_pos(bytes_, "tok.weight").dims + 8, 1000);  // more rows
  EXPECT_THAT(error(b), HasSubstr("tensor 'tok.weight' data ends past the end"));
}

TEST_F(GgufCorrupt, MisalignedOffset) {
  const auto pos = testing::tensor_info_pos(bytes_, "out.weight");
  poke<uint64_t>(bytes_, pos.offset, peek<uint64_t>(bytes_, pos.offset) + 8);
  EXPECT_THAT(error(bytes_), HasSubstr("tensor 'out.weight' has data offset 72, not a multiple of the alignment 32"));
}

Bytes file_with_alignment_key(auto add) {
  Writer w;
  add(w, "general.alignmenX");
  w.add_tensor("t", DType::F32, {2}, testing::iota_bytes(8));
  Bytes b = w.to_bytes();
  b[testing::find_bytes(b, "general.alignmenX") + 16] = 't';
  return b;
}

TEST_F(GgufCorrupt, BadAlignment) {
  EXPECT_THAT(error(file_with_alignment_key([](Writer& w, std::string k) { w.add_uint32(k, 48); })),
              HasSubstr("general.alignment 48 is not a power of two"));
  EXPECT_THAT(error(file_with_alignment_key([](Writer& w, std::string k) { w.add_uint32(k, 0); })),
              HasSubstr("general.alignment 0 is not a power of two"));
  EXPECT_THAT(error(file_with_alignment_key([](Writer& w, std::string k) { w.add_int32(k, -32); })),
              HasSubstr("general.alignment -32 is not a power of two"));
  EXPECT_THAT(error(file_with_alignment_key([](Writer& w, std::string k) { w.add_uint64(k, uint64_t{1} << 40); })),
              HasSubstr("is not a power of two in [1, 2^31]"));
  EXPECT_THAT(error(file_with_alignment_key([](Writer& w, std::string k) { w.add_string(k, "32"); })),
              HasSubstr("general.alignment has type string, expected uint32"));
  // A valid but different alignment is honoured: 16 moves the data section start.
  const Bytes ok = file_with_alignment_key([](Writer& w, std::string k) { w.add_uint32(k, 16); });
  file_.write(ok);
  EXPECT_EQ(File::open(file_.path()).alignment(), 16u);
}

TEST_F(GgufCorrupt, NotAFile) {
  EXPECT_THAT(error({}), HasSubstr("empty"));
  const std::string dir = file_.path() + ".d";
  std::filesystem::create_directory(dir);
  try {
    File::open(dir);
    ADD_FAILURE() << "opened a directory";
  } catch (const FormatError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("not a regular file"));
  }
  std::filesystem::remove(dir);
  try {
    File::open(dir + "/missing.gguf");
    ADD_FAILURE() << "opened a missing file";
  } catch (const FormatError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("cannot open: No such file or directory"));
  }
}

// Flip each byte of the header region to a few values: whatever happens, no crash, and
// anything thrown is a FormatError (the sanitizer builds check for memory errors).
TEST_F(GgufCorrupt, ByteFlipsNeverCrash) {
  file_.write(bytes_);
  const size_t header_end = File::open(file_.path()).data_offset();
  for (size_t i = 0; i < header_end; ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xFF}, uint8_t{0x80}, static_cast<uint8_t>(bytes_[i] + 1)}) {
      Bytes b = bytes_;
      b[i] = v;
      file_.write(b);
      try {
        const File f = File::open(file_.path());
        for (const TensorInfo& t : f.tensors()) {
          ASSERT_LE(static_cast<const uint8_t*>(t.data) + t.n_bytes, f.file_data() + f.file_size());
        }
      } catch (const FormatError&) {
      }
    }
  }
}

// Random multi-byte damage to the header, from a fixed seed: the same promise as above, and
// whatever opens keeps every view inside the mapping.
TEST_F(GgufCorrupt, RandomDamageNeverCrashes) {
  file_.write(bytes_);
  const size_t header_end = File::open(file_.path()).data_offset();
  std::mt19937 rng(1234);
  size_t opened = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = bytes_;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) b[rng() % header_end] = static_cast<uint8_t>(rng());
    file_.write(b);
    try {
      const File f = File::open(file_.path());
      ++opened;
      const uint8_t* end = f.file_data() + f.file_size();
      for (const TensorInfo& t : f.tensors()) {
        ASSERT_LE(static_cast<const uint8_t*>(t.data) + t.n_bytes, end) << t.name;
      }
      for (const KeyValue& kv : f.metadata()) {
        for (std::string_view s : kv.value.strings) {
          ASSERT_LE(reinterpret_cast<const uint8_t*>(s.data()) + s.size(), end);
        }
      }
    } catch (const FormatError&) {
    }
  }
  EXPECT_GT(opened, 0u);  // some damage (to string contents) leaves a valid file
}

}  // namespace
}  // namespace squeeze::gguf
