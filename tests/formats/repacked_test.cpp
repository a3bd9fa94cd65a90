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

// The dot of the decoded rows in double (the exact sum of the block products), and the sum of
// the products' magnitudes.
struct ExactDot {
  double value = 0, magnitude = 0;
};
ExactDot exact_dot(DType wt, const std::vector<uint8_t>& wq, const std::vector<uint8_t>& xq, int64_t n) {
  std::vector<float> wd(n), xd(n);
  kernels(wt, Isa::Scalar).dequantize_row(wq.data(), wd.data(), n);
  kernels(DType::Q8_0, Isa::Scalar).dequantize_row(xq.data(), xd.data(), n);
  ExactDot d;
  for (int64_t i = 0; i < n; ++i) {
    d.value += double(wd[i]) * xd[i];
    d.magnitude += std::abs(double(wd[i]) * xd[i]);
  }
  return d;
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
    const ExactDot ref = exact_dot(DType::Q4_0, wq, xq, n);
    ASSERT_NEAR(r, ref.value, 1e-5 * ref.magnitude);
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
    const ExactDot ref = exact_dot(DType::Q8_0, wq, xq, n);
    ASSERT_NEAR(r, ref.value, 1e-5 * ref.magnitude);
    if (r != s.vec_dot(n, wq.data(), xq.data())) ++differs_from_lanes;
  }
  EXPECT_GT(differs_from_lanes, 0);
}

}  // namespace
}  // namespace squeeze::formats::test
