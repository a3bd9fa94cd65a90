// The traits table: ids, names, block geometry, pairing, errors, and the kernel tables.
#include <gtest/gtest.h>

#include <iterator>
#include <vector>

#include "core/error.h"
#include "format_test_util.h"
#include "formats/blocks.h"

namespace squeeze::formats {
namespace {

using test::supported_types;

struct Geometry {
  uint32_t id;
  const char* name;
  int64_t block_size;
  size_t block_bytes;
  bool supported;
};

// ggml's values (ggml.h type ids, ggml-common.h block structs), written out independently of
// the table under test.
constexpr Geometry kGgml[] = {
    {0, "f32", 1, 4, true},          {1, "f16", 1, 2, true},
    {2, "q4_0", 32, 18, true},       {3, "q4_1", 32, 20, true},
    {6, "q5_0", 32, 22, true},       {7, "q5_1", 32, 24, true},
    {8, "q8_0", 32, 34, true},       {9, "q8_1", 32, 36, true},
    {10, "q2_K", 256, 84, false},    {11, "q3_K", 256, 110, false},
    {12, "q4_K", 256, 144, true},    {13, "q5_K", 256, 176, false},
    {14, "q6_K", 256, 210, true},    {15, "q8_K", 256, 292, true},
    {16, "iq2_xxs", 256, 66, false}, {17, "iq2_xs", 256, 74, false},
    {18, "iq3_xxs", 256, 98, false}, {19, "iq1_s", 256, 50, false},
    {20, "iq4_nl", 32, 18, false},   {21, "iq3_s", 256, 110, false},
    {22, "iq2_s", 256, 82, false},   {23, "iq4_xs", 256, 136, false},
    {24, "i8", 1, 1, false},         {25, "i16", 1, 2, false},
    {26, "i32", 1, 4, false},        {27, "i64", 1, 8, false},
    {28, "f64", 1, 8, false},        {29, "iq1_m", 256, 56, false},
    {30, "bf16", 1, 2, true},        {34, "tq1_0", 256, 54, false},
    {35, "tq2_0", 256, 66, false},   {39, "mxfp4", 32, 17, false},
    {40, "nvfp4", 64, 36, false},    {41, "q1_0", 128, 18, false},
};

// squeeze's own (docs/FORMATS.md): id 1000 + 3 * (B - 2) + log2(G / 32), one block per group of
// G, 4 + G * B / 8 bytes.
constexpr Geometry kSq[] = {
    {1000, "sq2_g32", 32, 12, true},  {1001, "sq2_g64", 64, 20, true},
    {1002, "sq2_g128", 128, 36, true}, {1003, "sq3_g32", 32, 16, true},
    {1004, "sq3_g64", 64, 28, true},  {1005, "sq3_g128", 128, 52, true},
    {1006, "sq4_g32", 32, 20, true},  {1007, "sq4_g64", 64, 36, true},
    {1008, "sq4_g128", 128, 68, true},
};

TEST(FormatInfo, MatchesGgmlIdsNamesAndBlockGeometry) {
  std::vector<Geometry> all(std::begin(kGgml), std::end(kGgml));
  all.insert(all.end(), std::begin(kSq), std::end(kSq));
  for (const Geometry& g : all) {
    const FormatInfo* info = format_info(g.id);
    ASSERT_NE(info, nullptr) << "id " << g.id;
    EXPECT_EQ(static_cast<uint32_t>(info->type), g.id);
    EXPECT_EQ(info->name, g.name);
    EXPECT_EQ(info->block_size, g.block_size) << g.name;
    EXPECT_EQ(info->block_bytes, g.block_bytes) << g.name;
    EXPECT_EQ(info->supported, g.supported) << g.name;
    EXPECT_EQ(&format_info(info->type), info);
    EXPECT_EQ(format_by_name(g.name), info);
  }
}

TEST(FormatInfo, BlockStructsHaveTheTableSizes) {
  EXPECT_EQ(sizeof(BlockQ4_0), format_info(DType::Q4_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ4_1), format_info(DType::Q4_1).block_bytes);
  EXPECT_EQ(sizeof(BlockQ5_0), format_info(DType::Q5_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ5_1), format_info(DType::Q5_1).block_bytes);
  EXPECT_EQ(sizeof(BlockQ8_0), format_info(DType::Q8_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ8_1), format_info(DType::Q8_1).block_bytes);
  EXPECT_EQ(sizeof(BlockQ4_K), format_info(DType::Q4_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ6_K), format_info(DType::Q6_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ8_K), format_info(DType::Q8_K).block_bytes);
}

TEST(FormatInfo, UnknownIdsAreNull) {
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u, 63u, 64u, 99u, 999u, 1009u,
                      1064u, 0xFFFFFFFFu}) {
    EXPECT_EQ(format_info(id), nullptr) << id;
  }
  EXPECT_THROW(format_info(static_cast<DType>(99)), FormatError);
}

TEST(FormatInfo, NamesParseCaseInsensitively) {
  EXPECT_EQ(format_by_name("Q4_K"), &format_info(DType::Q4_K));
  EXPECT_EQ(format_by_name("q4_k"), &format_info(DType::Q4_K));
  EXPECT_EQ(format_by_name("BF16"), &format_info(DType::BF16));
  EXPECT_EQ(format_by_name("SQ3_G64"), &format_info(DType::SQ3_G64));
  EXPECT_EQ(format_by_name("q4_2"), nullptr);
  EXPECT_EQ(format_by_name(""), nullptr);
}

TEST(FormatInfo, VecDotPairingIsGgmls) {
  EXPECT_EQ(format_info(DType::F32).vec_dot_type, DType::F32);
  EXPECT_EQ(format_info(DType::F16).vec_dot_type, DType::F16);
  EXPECT_EQ(format_info(DType::BF16).vec_dot_type, DType::BF16);
  EXPECT_EQ(format_info(DType::Q4_0).vec_dot_type, DType::Q8_0);
  EXPECT_EQ(format_info(DType::Q5_0).vec_dot_type, DType::Q8_0);
  EXPECT_EQ(format_info(DType::Q8_0).vec_dot_type, DType::Q8_0);
  EXPECT_EQ(format_info(DType::Q4_1).vec_dot_type, DType::Q8_1);
  EXPECT_EQ(format_info(DType::Q5_1).vec_dot_type, DType::Q8_1);
  EXPECT_EQ(format_info(DType::Q4_K).vec_dot_type, DType::Q8_K);
  EXPECT_EQ(format_info(DType::Q6_K).vec_dot_type, DType::Q8_K);
  for (DType t : test::sq_types()) EXPECT_EQ(format_info(t).vec_dot_type, DType::Q8_1);
  for (DType t : supported_types()) {
    // The activations' block size divides the weights' (it is the same for ggml's formats), so
    // a row of one is a row of the other.
    EXPECT_EQ(format_info(t).block_size % format_info(format_info(t).vec_dot_type).block_size, 0)
        << format_info(t).name;
  }
}

TEST(FormatInfo, RowBytes) {
  EXPECT_EQ(row_bytes(DType::F32, 7), 28u);
  EXPECT_EQ(row_bytes(DType::BF16, 4096), 8192u);
  EXPECT_EQ(row_bytes(DType::Q4_0, 4096), 128u * 18u);
  EXPECT_EQ(row_bytes(DType::Q4_K, 4096), 16u * 144u);
  EXPECT_EQ(row_bytes(DType::Q6_K, 0), 0u);
  EXPECT_EQ(row_bytes(DType::Q3_K, 512), 220u);  // geometry is known even when unsupported
  EXPECT_EQ(row_bytes(DType::SQ3_G128, 4096), 32u * 52u);
  EXPECT_EQ(row_bytes(DType::SQ2_G32, 96), 3u * 12u);
  EXPECT_THROW(row_bytes(DType::SQ2_G64, 96), FormatError);
  EXPECT_THROW(row_bytes(DType::Q4_K, 100), FormatError);
  EXPECT_THROW(row_bytes(DType::Q8_0, 33), FormatError);
  EXPECT_THROW(row_bytes(static_cast<DType>(99), 32), FormatError);
}

TEST(Kernels, UnsupportedFormatsThrowWithTheirName) {
  try {
    kernels(DType::Q3_K, Isa::Scalar);
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("q3_K"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels(DType::IQ2_XXS, Isa::Avx2), FormatError);
}

TEST(Kernels, EverySupportedFormatHasItsFunctions) {
  for (DType t : supported_types()) {
    for (Isa isa : {Isa::Scalar, Isa::Avx2}) {
      const Kernels& k = kernels(t, isa);
      EXPECT_NE(k.dequantize_row, nullptr) << format_info(t).name;
      EXPECT_NE(k.quantize_row, nullptr) << format_info(t).name;
      EXPECT_EQ(k.vec_dot == nullptr, test::is_activation_only(t)) << format_info(t).name;
    }
  }
  EXPECT_EQ(&kernels(DType::Q4_0), &kernels(DType::Q4_0, active_isa()));
}

// The AVX2 table really holds AVX2 functions (otherwise the SIMD-vs-scalar tests would compare
// the scalar code with itself).
TEST(Kernels, Avx2TableReplacesTheHotFunctions) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  for (DType t : supported_types()) {
    const Kernels& s = kernels(t, Isa::Scalar);
    const Kernels& v = kernels(t, Isa::Avx2);
    if (t != DType::F32) {
      EXPECT_NE(s.dequantize_row, v.dequantize_row) << format_info(t).name;
    }
    if (!test::is_activation_only(t)) {
      EXPECT_NE(s.vec_dot, v.vec_dot) << format_info(t).name;
    }
  }
  for (DType t : test::activation_types()) {
    if (t == DType::F32) continue;  // a copy either way
    EXPECT_NE(kernels(t, Isa::Scalar).quantize_row, kernels(t, Isa::Avx2).quantize_row)
        << format_info(t).name;
  }
}

}  // namespace
}  // namespace squeeze::formats
