// Kernels::vec_dot_repacked: the dot product in the order of llama.cpp's repacked x86 kernels.
// AVX2 bit-identical to scalar; both equal the float dot; and the order really differs from
// vec_dot's (else the entry would be pointless).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "format_test_util.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::test {
namespace {

std::vector<uint8_t> quantize(DType type, const std::vector<float>& x) {
  std::vector<uint8_t> out(row_bytes(type, static_cast<int64_t>(x.size())));
  kernels(type, Isa::Scalar).quantize_row(x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

TEST(VecDotRepacked, Q4_0OrderIsBlockwiseAndMatchesOnBothPaths) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t n = 576;
  const auto& s = kernels(DType::Q4_0, Isa::Scalar);
  ASSERT_NE(s.vec_dot_repacked, nullptr);
  EXPECT_EQ(kernels(DType::Q4_1, Isa::Scalar).vec_dot_repacked, nullptr);
  int differs_from_lanes = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> w(n), x(n);
    for (float& v : w) v = dist(rng);
    for (float& v : x) v = dist(rng);
    const auto wq = quantize(DType::Q4_0, w);
    const auto xq = quantize(DType::Q8_0, x);
    const float r = s.vec_dot_repacked(n, wq.data(), xq.data());
    // Reference: exact block sums in double.
    std::vector<float> wd(n), xd(n);
    s.dequantize_row(wq.data(), wd.data(), n);
    kernels(DType::Q8_0, Isa::Scalar).dequantize_row(xq.data(), xd.data(), n);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += double(wd[i]) * xd[i];
      mag += std::abs(double(wd[i]) * xd[i]);
    }
    ASSERT_NEAR(r, ref, 1e-5 * mag);
    if (r != s.vec_dot(n, wq.data(), xq.data())) ++differs_from_lanes;
    if (cpu_has_avx2()) {
      ASSERT_EQ(r, kernels(DType::Q4_0, Isa::Avx2).vec_dot_repacked(n, wq.data(), xq.data()));
    }
  }
  EXPECT_GT(differs_from_lanes, 0);
}

// Q8_0's block order, the AVX-512 and AMX tiers': within rounding of the exact sum, different
// from the lane order of the other tiers, and only those tiers sum Q8_0 this way.
TEST(VecDotRepacked, Q8_0BlockOrderOnTheAvx512AndAmxTiers) {
  EXPECT_EQ(kernels(DType::Q8_0, Isa::Scalar).vec_dot_repacked, nullptr);
  if (cpu_has_avx2()) {
    EXPECT_EQ(kernels(DType::Q8_0, Isa::Avx2).vec_dot_repacked, nullptr);
  }
  if (cpu_has_avx512()) {
    EXPECT_EQ(kernels(DType::Q8_0, Isa::Avx512).vec_dot_repacked, &scalar::vec_dot_q8_0_blocks);
  }
  if (cpu_has_amx()) {
    EXPECT_EQ(kernels(DType::Q8_0, Isa::Amx).vec_dot_repacked, &scalar::vec_dot_q8_0_blocks);
  }
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t n = 576;
  const auto& s = kernels(DType::Q8_0, Isa::Scalar);
  int differs_from_lanes = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> w(n), x(n);
    for (float& v : w) v = dist(rng);
    for (float& v : x) v = dist(rng);
    const auto wq = quantize(DType::Q8_0, w);
    const auto xq = quantize(DType::Q8_0, x);
    const float r = scalar::vec_dot_q8_0_blocks(n, wq.data(), xq.data());
    // Reference: the exact blockwise sum, in double.
    std::vector<float> wd(n), xd(n);
    s.dequantize_row(wq.data(), wd.data(), n);
    s.dequantize_row(xq.data(), xd.data(), n);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += double(wd[i]) * xd[i];
      mag += std::abs(double(wd[i]) * xd[i]);
    }
    ASSERT_NEAR(r, ref, 1e-5 * mag);
    if (r != s.vec_dot(n, wq.data(), xq.data())) ++differs_from_lanes;
  }
  EXPECT_GT(differs_from_lanes, 0);
}

}  // namespace
}  // namespace squeeze::formats::test
