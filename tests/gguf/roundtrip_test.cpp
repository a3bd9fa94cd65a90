// Writer -> reader round trips: every value type, arrays, tensors, alignment, copy_metadata.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <numbers>

#include "gguf_test_util.h"

namespace squeeze::gguf {
namespace {

using formats::DType;
using testing::Bytes;
using testing::TempFile;

template <typename T>
std::span<const uint8_t> packed(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

Writer all_values_writer() {
  Writer w;
  w.add_uint8("t.u8", 200);
  w.add_int8("t.i8", -100);
  w.add_uint16("t.u16", 60000);
  w.add_int16("t.i16", -30000);
  w.add_uint32("t.u32", 4000000000u);
  w.add_int32("t.i32", -2000000000);
  w.add_uint64("t.u64", (uint64_t{1} << 63) + 5);
  w.add_int64("t.i64", -(int64_t{1} << 62));
  w.add_float32("t.f32", 1.5f);
  w.add_float64("t.f64", std::numbers::pi);
  w.add_bool("t.true", true);
  w.add_bool("t.false", false);
  w.add_string("t.str", "h\xc3\xa9llo\nworld");
  w.add_string("t.empty", "");
  w.add_string_array("t.strs", {"a", "", "ccc"});
  w.add_string_array("t.no_strs", {});
  w.add_int32_array("t.i32s", {1, -2, 3});
  w.add_float32_array("t.f32s", {0.5f, -1.25f});
  w.add_array("t.u8s", ValueType::UInt8, packed(std::vector<uint8_t>{1, 2, 255}));
  w.add_array("t.i16s", ValueType::Int16, packed(std::vector<int16_t>{-7, 7}));
  w.add_array("t.u64s", ValueType::UInt64, packed(std::vector<uint64_t>{9, uint64_t{1} << 40}));
  w.add_array("t.big_u64s", ValueType::UInt64, packed(std::vector<uint64_t>{~uint64_t{0}}));
  w.add_array("t.f64s", ValueType::Float64, packed(std::vector<double>{2.5, -0.125}));
  w.add_array("t.bools", ValueType::Bool, packed(std::vector<uint8_t>{1, 0, 1}));
  w.add_array("t.no_i32s", ValueType::Int32, {});
  return w;
}

TEST(GgufRoundTrip, EveryValueType) {
  TempFile file;
  file.write(all_values_writer().to_bytes());
  const File f = File::open(file.path());

  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.metadata().size(), 25u);
  EXPECT_EQ(f.metadata()[0].key, "t.u8");  // order kept
  EXPECT_TRUE(f.tensors().empty());

  EXPECT_EQ(f.require_int("t.u8"), 200);
  EXPECT_EQ(f.find("t.u8")->type, ValueType::UInt8);
  EXPECT_EQ(f.find("t.u8")->u64, 200u);
  EXPECT_EQ(f.require_int("t.i8"), -100);
  EXPECT_EQ(f.require_int("t.u16"), 60000);
  EXPECT_EQ(f.require_int("t.i16"), -30000);
  EXPECT_EQ(f.require_int("t.u32"), 4000000000);
  EXPECT_EQ(f.require_int("t.i32"), -2000000000);
  EXPECT_EQ(f.find("t.u64")->u64, (uint64_t{1} << 63) + 5);
  EXPECT_THROW(f.require_int("t.u64"), FormatError);  // does not fit in int64
  EXPECT_EQ(f.require_int("t.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(f.find("t.i64")->u64, 0u);  // negative: the unsigned field stays 0
  EXPECT_EQ(f.require_float("t.f32"), 1.5);
  EXPECT_EQ(f.find("t.f32")->type, ValueType::Float32);
  EXPECT_EQ(f.require_float("t.f64"), std::numbers::pi);
  EXPECT_EQ(f.require_float("t.u8"), 200.0);  // integers read as numbers
  EXPECT_EQ(f.get_bool("t.true"), true);
  EXPECT_EQ(f.get_bool("t.false"), false);
  EXPECT_EQ(f.require_string("t.str"), "h\xc3\xa9llo\nworld");
  EXPECT_EQ(f.get_string("t.empty"), "");

  const std::vector<std::string_view> strs = f.require_string_array("t.strs");
  EXPECT_EQ(strs, (std::vector<std::string_view>{"a", "", "ccc"}));
  EXPECT_TRUE(f.require_string_array("t.no_strs").empty());
  EXPECT_EQ(f.get_int_array("t.i32s"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_float_array("t.f32s"), (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(f.get_int_array("t.u8s"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(f.get_int_array("t.i16s"), (std::vector<int64_t>{-7, 7}));
  EXPECT_EQ(f.get_int_array("t.u64s"), (std::vector<int64_t>{9, int64_t{1} << 40}));
  EXPECT_THROW(f.get_int_array("t.big_u64s"), FormatError);
  EXPECT_EQ(f.get_float_array("t.f64s"), (std::vector<float>{2.5f, -0.125f}));
  EXPECT_TRUE(f.get_int_array("t.no_i32s").empty());
  const Value* bools = f.find("t.bools");
  ASSERT_NE(bools, nullptr);
  EXPECT_EQ(bools->type, ValueType::Array);
  EXPECT_EQ(bools->array_type, ValueType::Bool);
  ASSERT_EQ(bools->array_len, 3u);
  EXPECT_EQ(bools->array_data[0], 1);
  EXPECT_EQ(bools->array_data[1], 0);
}

TEST(GgufRoundTrip, MissingKeysAndWrongTypes) {
  TempFile file;
  file.write(all_values_writer().to_bytes());
  const File f = File::open(file.path());

  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_EQ(f.get_int("nope"), std::nullopt);
  EXPECT_EQ(f.get_float("nope"), std::nullopt);
  EXPECT_EQ(f.get_string("nope"), std::nullopt);
  EXPECT_EQ(f.get_bool("nope"), std::nullopt);
  EXPECT_TRUE(f.get_int_array("nope").empty());
  EXPECT_TRUE(f.get_float_array("nope").empty());

  auto message = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const FormatError& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string missing = message([&] { f.require_int("llama.block_count"); });
  EXPECT_NE(missing.find("missing required key 'llama.block_count'"), std::string::npos) << missing;
  EXPECT_NE(missing.find(file.path()), std::string::npos) << missing;
  EXPECT_NE(message([&] { f.require_float("nope"); }).find("missing required key"), std::string::npos);
  EXPECT_NE(message([&] { f.require_string("nope"); }).find("missing required key"), std::string::npos);
  EXPECT_NE(message([&] { f.require_string_array("nope"); }).find("missing"), std::string::npos);

  const std::string wrong = message([&] { f.require_int("t.str"); });
  EXPECT_NE(wrong.find("key 't.str' has type string, expected an integer"), std::string::npos) << wrong;
  EXPECT_THROW(f.get_int("t.f32"), FormatError);
  EXPECT_THROW(f.require_float("t.str"), FormatError);
  EXPECT_THROW(f.require_string("t.u8"), FormatError);
  EXPECT_THROW(f.get_string("t.strs"), FormatError);
  EXPECT_THROW(f.get_bool("t.u8"), FormatError);
  EXPECT_THROW(f.require_string_array("t.i32s"), FormatError);
  EXPECT_THROW(f.get_int_array("t.strs"), FormatError);
  EXPECT_THROW(f.get_int_array("t.u8"), FormatError);
  EXPECT_THROW(f.get_float_array("t.i32s"), FormatError);
}

TEST(GgufRoundTrip, Tensors) {
  Writer w;
  w.add_string("general.architecture", "llama");
  const Bytes f32 = testing::iota_bytes(4 * 3 * 4, 1);
  const Bytes q8 = testing::iota_bytes(34 * 2 * 2 * 3, 2);  // [64, 2, 3]: 2 blocks per row
  const Bytes f16 = testing::iota_bytes(2 * 5, 3);         // 10 bytes: needs padding
  const Bytes q3k = testing::iota_bytes(110, 4);            // known but unsupported type
  const Bytes f32_4d = testing::iota_bytes(4 * 1 * 2 * 1 * 2, 5);
  w.add_tensor("a.weight", DType::F32, {4, 3}, f32);
  w.add_tensor("b.weight", DType::Q8_0, {64, 2, 3}, q8);
  w.add_tensor("c", DType::F16, {5}, f16);
  w.add_tensor("d.q3k", DType::Q3_K, {256, 1}, q3k);
  w.add_tensor("e.4d", DType::F32, {1, 2, 1, 2}, f32_4d);
  w.add_tensor("f.empty", DType::F32, {0, 7}, {});
  EXPECT_EQ(w.n_tensors(), 6u);

  TempFile file;
  file.write(w.to_bytes());
  const File f = File::open(file.path());
  ASSERT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.data_offset() % 32, 0u);

  const TensorInfo& a = f.tensors()[0];
  EXPECT_EQ(a.name, "a.weight");
  EXPECT_EQ(a.type, DType::F32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(a.n_elements, 12);
  EXPECT_EQ(a.n_bytes, 48u);
  EXPECT_EQ(a.offset, 0u);

  const TensorInfo* b = f.find_tensor("b.weight");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, DType::Q8_0);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{64, 2, 3}));
  EXPECT_EQ(b->n_elements, 384);
  EXPECT_EQ(b->n_bytes, q8.size());
  EXPECT_EQ(b->offset, 64u);  // 48 bytes padded to 64

  EXPECT_EQ(f.find_tensor("d.q3k")->type, DType::Q3_K);
  EXPECT_EQ(f.find_tensor("e.4d")->shape, (std::vector<int64_t>{1, 2, 1, 2}));
  EXPECT_EQ(f.find_tensor("f.empty")->n_elements, 0);
  EXPECT_EQ(f.find_tensor("f.empty")->n_bytes, 0u);
  EXPECT_EQ(f.find_tensor("missing"), nullptr);

  const std::vector<const Bytes*> data = {&f32, &q8, &f16, &q3k, &f32_4d};
  for (size_t i = 0; i < data.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 32, 0u);  // the mapping is page-aligned
    EXPECT_GE(static_cast<const uint8_t*>(t.data), f.file_data());
    ASSERT_EQ(t.n_bytes, data[i]->size());
    EXPECT_EQ(Bytes(static_cast<const uint8_t*>(t.data), static_cast<const uint8_t*>(t.data) + t.n_bytes), *data[i]);
  }
}

TEST(GgufRoundTrip, CustomAlignment) {
  Writer w(64);
  w.add_uint32("x", 1);
  w.add_tensor("t0", DType::F32, {3}, testing::iota_bytes(12));
  w.add_tensor("t1", DType::F32, {5}, testing::iota_bytes(20));
  EXPECT_EQ(w.n_kv(), 2u);
  const Bytes bytes = w.to_bytes();
  EXPECT_EQ(bytes.size() % 64, 0u);

  TempFile file;
  file.write(bytes);
  const File f = File::open(file.path());
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.find("general.alignment")->type, ValueType::UInt32);
  EXPECT_EQ(f.require_int("general.alignment"), 64);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.tensors()[1].offset, 64u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.tensors()[1].data) % 64, 0u);
}

TEST(GgufRoundTrip, AddingAKeyAgainReplacesItInPlace) {
  Writer w;
  w.add_uint32("first", 1);
  w.add_string("second", "x");
  w.add_int64("first", -5);
  TempFile file;
  file.write(w.to_bytes());
  const File f = File::open(file.path());
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].key, "first");
  EXPECT_EQ(f.metadata()[0].value.type, ValueType::Int64);
  EXPECT_EQ(f.require_int("first"), -5);
}

TEST(GgufRoundTrip, CopyMetadataReproducesTheFile) {
  Writer w = all_values_writer();
  const Bytes original = w.to_bytes();
  TempFile file;
  file.write(original);
  const File f = File::open(file.path());

  Writer copy;
  copy.copy_metadata(f);
  EXPECT_EQ(copy.to_bytes(), original);

  Writer partial(64);
  const std::string_view skip[] = {"t.u8", "t.strs"};
  partial.copy_metadata(f, skip);
  TempFile file2("2");
  file2.write(partial.to_bytes());
  const File g = File::open(file2.path());
  EXPECT_EQ(g.find("t.u8"), nullptr);
  EXPECT_EQ(g.find("t.strs"), nullptr);
  EXPECT_EQ(g.require_string("t.str"), f.require_string("t.str"));
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.metadata().size(), f.metadata().size() - 2 + 1);  // + general.alignment
}

TEST(GgufRoundTrip, WriteGoesThroughATemporaryFile) {
  Writer w;
  w.add_string("general.name", "tiny");
  w.add_tensor("t", DType::F32, {2}, testing::iota_bytes(8));
  TempFile file;
  w.write(file.path());
  // Nothing else in the directory starts with the file's name (the AtomicFile's temporary).
  const std::filesystem::path target(file.path());
  for (const auto& e : std::filesystem::directory_iterator(target.parent_path())) {
    const std::string name = e.path().filename().string();
    EXPECT_FALSE(name != target.filename().string() && name.rfind(target.filename().string(), 0) == 0)
        << name;
  }
  const File f = File::open(file.path());
  EXPECT_EQ(f.require_string("general.name"), "tiny");
  EXPECT_EQ(f.file_size(), w.to_bytes().size());

  // A failed write leaves neither the target nor the temporary file behind.
  const std::string bad = file.path() + ".dir/none/x.gguf";
  EXPECT_THROW(w.write(bad), Error);
  EXPECT_FALSE(std::filesystem::exists(bad));
}

TEST(GgufRoundTrip, Version2IsRead) {
  Writer w;
  w.add_uint32("k", 7);
  w.add_tensor("t", DType::F32, {2}, testing::iota_bytes(8));
  Bytes bytes = w.to_bytes();
  testing::poke<uint32_t>(bytes, 4, 2);
  TempFile file;
  file.write(bytes);
  const File f = File::open(file.path());
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.require_int("k"), 7);
  EXPECT_EQ(f.tensors().size(), 1u);
}

TEST(GgufRoundTrip, EmptyFileHeaderOnly) {
  TempFile file;
  file.write(Writer().to_bytes());
  const File f = File::open(file.path());
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufWriter, RejectsMisuse) {
  Writer w;
  EXPECT_THROW(Writer(48), Error);
  EXPECT_THROW(Writer(0), Error);
  EXPECT_THROW(w.add_uint32("general.alignment", 64), Error);
  EXPECT_THROW(w.add_tensor("t", DType::F32, {4}, testing::iota_bytes(12)), Error);  // 16 needed
  EXPECT_THROW(w.add_tensor("t", DType::Q8_0, {16}, testing::iota_bytes(17)), Error);  // half block
  EXPECT_THROW(w.add_tensor("t", DType::F32, {1, 1, 1, 1, 1}, testing::iota_bytes(4)), Error);
  EXPECT_THROW(w.add_tensor("t", DType::F32, {}, {}), Error);
  EXPECT_THROW(w.add_tensor(std::string(64, 'n'), DType::F32, {1}, testing::iota_bytes(4)), Error);
  EXPECT_THROW(w.add_array("a", ValueType::String, {}), Error);
  EXPECT_THROW(w.add_array("a", ValueType::Int32, testing::iota_bytes(6)), Error);
  EXPECT_THROW(w.add_array("a", ValueType::Bool, std::vector<uint8_t>{2}), Error);
  w.add_tensor("t", DType::F32, {1}, testing::iota_bytes(4));
  EXPECT_THROW(w.add_tensor("t", DType::F32, {1}, testing::iota_bytes(4)), Error);
}

}  // namespace
}  // namespace squeeze::gguf
