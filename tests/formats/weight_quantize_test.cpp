// The weight quantizers (Kernels::quantize_row_ref): what llama-quantize writes. For Q8_0 that is
// ggml's quantize_row_q8_0_ref (id = 1 / d, halves away from zero), which differs from the
// run-time activation quantizer (127 / amax, halves to even) only at ties; for every other
// weight format it is quantize_row itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "format_test_util.h"
#include "formats/blocks.h"

namespace squeeze::formats::test {
namespace {

std::vector<uint8_t> run(void (*fn)(const float*, void*, int64_t), DType type,
                         const std::vector<float>& x) {
  std::vector<uint8_t> out(row_bytes(type, static_cast<int64_t>(x.size())));
  fn(x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

// amax = 127 makes d = 1 and both multipliers exactly 1, so each code is round(x) and the two
// quantizers differ exactly on the halves: away from zero (ref) against to even (activations).
TEST(WeightQuantizeQ8_0, RoundsHalvesAwayFromZero) {
  std::vector<float> x(kBlock32, 0.0f);
  const float in[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -1.5f, 3.49f, -3.51f, 126.5f, 7.0f};
  const int ref[] = {127, 3, -3, 1, -1, 2, -2, 3, -4, 127, 7};
  const int act[] = {127, 2, -2, 0, 0, 2, -2, 3, -4, 126, 7};
  std::copy(std::begin(in), std::end(in), x.begin());

  const auto& k = kernels(DType::Q8_0, Isa::Scalar);
  BlockQ8_0 r, a;
  k.quantize_row_ref(x.data(), &r, kBlock32);
  k.quantize_row(x.data(), &a, kBlock32);
  EXPECT_EQ(f16_to_f32(r.d), 1.0f);
  EXPECT_EQ(f16_to_f32(a.d), 1.0f);
  for (size_t j = 0; j < std::size(in); ++j) {
    EXPECT_EQ(r.qs[j], ref[j]) << "element " << j << " = " << in[j];
    EXPECT_EQ(a.qs[j], act[j]) << "element " << j << " = " << in[j];
  }
  for (int j = static_cast<int>(std::size(in)); j < kBlock32; ++j) EXPECT_EQ(r.qs[j], 0);
}

TEST(WeightQuantizeQ8_0, ZeroBlockGivesZeroScaleAndCodes) {
  const std::vector<float> x(2 * kBlock32, 0.0f);
  const auto bytes = run(kernels(DType::Q8_0, Isa::Scalar).quantize_row_ref, DType::Q8_0, x);
  for (uint8_t b : bytes) EXPECT_EQ(b, 0);
}

// On random data the scales agree everywhere and a code differs (by one) only where
// x * 127 / amax lies within a few ulps of a half-integer: the two multipliers 1 / (amax / 127)
// and 127 / amax may differ in their last bit, which only matters next to a tie.
TEST(WeightQuantizeQ8_0, DiffersFromActivationQuantizerOnlyAtTies) {
  std::vector<float> x = uniform(4096 * kBlock32, 77);
  // Plant exact ties: amax 127 * 2^-3, so every multiple of 2^-4 is a half-integer code.
  for (int j = 0; j < kBlock32; ++j) x[j] = (j == 0 ? 127.0f : static_cast<float>(2 * j - 31) / 2) / 8;
  const auto& k = kernels(DType::Q8_0, Isa::Scalar);
  const auto ref = run(k.quantize_row_ref, DType::Q8_0, x);
  const auto act = run(k.quantize_row, DType::Q8_0, x);
  const auto* r = reinterpret_cast<const BlockQ8_0*>(ref.data());
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act.data());
  int64_t n_diff = 0;
  for (size_t i = 0; i < x.size() / kBlock32; ++i) {
    ASSERT_EQ(r[i].d, a[i].d) << "block " << i;
    float amax = 0.0f;
    for (int j = 0; j < kBlock32; ++j) amax = std::max(amax, std::fabs(x[i * kBlock32 + j]));
    for (int j = 0; j < kBlock32; ++j) {
      if (r[i].qs[j] == a[i].qs[j]) continue;
      ++n_diff;
      const double v = static_cast<double>(x[i * kBlock32 + j]) * 127.0 / amax;
      EXPECT_EQ(std::abs(r[i].qs[j] - a[i].qs[j]), 1);
      EXPECT_NEAR(std::fabs(v - std::trunc(v)), 0.5, 1e-5) << "block " << i << " element " << j;
      if (i == 0) {
        EXPECT_GT(std::abs(r[i].qs[j]), std::abs(a[i].qs[j])) << "exact tie, element " << j;
      }
    }
  }
  // The planted block alone has 16 exact ties whose integer part is even (+-0.5, +-2.5, ...).
  EXPECT_GE(n_diff, 16);
}

TEST(WeightQuantize, OtherFormatsUseTheirQuantizeRow) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                  DType::Q5_1, DType::Q4_K, DType::Q6_K}) {
    const auto& k = kernels(t, Isa::Scalar);
    ASSERT_NE(k.quantize_row_ref, nullptr) << format_info(t).name;
    EXPECT_EQ(k.quantize_row_ref, k.quantize_row) << format_info(t).name;
  }
  EXPECT_EQ(kernels(DType::Q8_1, Isa::Scalar).quantize_row_ref, nullptr);
  EXPECT_EQ(kernels(DType::Q8_K, Isa::Scalar).quantize_row_ref, nullptr);
}

// Weights are quantized offline by the scalar reference on every ISA.
TEST(WeightQuantize, SameFunctionOnEveryIsa) {
  if (unavailable(Isa::Avx2)) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  for (DType t : supported_types()) {
    EXPECT_EQ(kernels(t, Isa::Avx2).quantize_row_ref, kernels(t, Isa::Scalar).quantize_row_ref)
        << format_info(t).name;
  }
}

}  // namespace
}  // namespace squeeze::formats::test
