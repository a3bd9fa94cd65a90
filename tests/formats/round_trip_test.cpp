// Quantize then dequantize: the error of every format stays under a bound derived from its
// step size, on both ISAs (the AVX2 table quantizes activations itself and decodes everything).
#include <gtest/gtest.h>

#include <cmath>

#include "format_test_util.h"

namespace squeeze::formats::test {
namespace {

// RMS error bound for 65536 values uniform in [-1, 1] (fixed seed, so the numbers below are
// reproducible, not statistical).
//
// A uniform quantizer with step s has error uniform in [-s/2, s/2], RMS s / sqrt(12). With
// amax ~ 1 (the largest |x| of a block of 32 is ~0.97, of 256 ~0.996):
//   format  step                                 theory   measured  bound
//   Q8_0    amax / 127                           0.00227  0.00217   0.0025  (Q8_1, Q8_K alike)
//   Q5_0    amax / 16                            0.0180   0.0180    0.0200
//   Q5_1    (max - min) / 31                     0.0186   0.0169    0.0190
//   Q4_0    amax / 8; the side opposite the
//           largest value clips at 7 steps      >0.0361   0.0375    0.0410
//   Q4_1    (max - min) / 15                     0.0385   0.0350    0.0385
//   Q4_K    fitted scale and min per 32          -        0.0315    0.0330
//   Q6_K    fitted scale per 16, amax / 32       0.0090   0.0076    0.0080
//   sqB_gG  (max - min) / (2^B - 1) per G; the expected range of G uniform values is
//           2 (G - 1) / (G + 1): 1.879, 1.938, 1.969 for G = 32, 64, 128
//     sq2   g32 / g64 / g128                     0.1808   0.1745    0.1850
//                                                0.1865   0.1831    0.1900
//                                                0.1894   0.1874    0.1930
//     sq3                                        0.0775   0.0751    0.0790
//                                                0.0799   0.0790    0.0815
//                                                0.0812   0.0807    0.0830
//     sq4                                        0.0362   0.0350    0.0370
//                                                0.0373   0.0367    0.0380
//                                                0.0379   0.0376    0.0385
// (Measured under theory by about sqrt((G - 2) / G): the min and max of a group decode exactly,
// up to the half rounding of d and m.)
// The K bounds also hold the scale searches to account: without them (plain min/max or
// amax rounding) Q4_K measures 0.0351 and Q6_K 0.0082, over the bounds. A rounding mistake
// (truncating instead of rounding doubles the RMS) or a wrong scale fails every bound. F16 and
// BF16 round each value to nearest, a relative error of at most 2^-11 and 2^-8, checked per
// element; F32 must be exact.
struct Bound {
  DType type;
  double max_rms;
};

constexpr Bound kBounds[] = {
    {DType::Q8_0, 0.0025}, {DType::Q8_1, 0.0025}, {DType::Q8_K, 0.0025},
    {DType::Q5_0, 0.0200}, {DType::Q5_1, 0.0190}, {DType::Q4_0, 0.0410},
    {DType::Q4_1, 0.0385}, {DType::Q4_K, 0.0330}, {DType::Q6_K, 0.0080},
    {DType::SQ2_G32, 0.1850}, {DType::SQ2_G64, 0.1900}, {DType::SQ2_G128, 0.1930},
    {DType::SQ3_G32, 0.0790}, {DType::SQ3_G64, 0.0815}, {DType::SQ3_G128, 0.0830},
    {DType::SQ4_G32, 0.0370}, {DType::SQ4_G64, 0.0380}, {DType::SQ4_G128, 0.0385},
};

double rms_error(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(sum / static_cast<double>(a.size()));
}

class RoundTrip : public testing::TestWithParam<Case> {};

TEST_P(RoundTrip, ErrorWithinTheFormatsBound) {
  const auto [type, isa] = GetParam();
  if (unavailable(isa)) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  const std::vector<float> x = uniform(16 * kRow, 1234);
  const std::vector<float> y = dequantize(type, isa, quantize(type, isa, x), 16 * kRow);
  const double rms = rms_error(x, y);

  if (type == DType::F32) {
    EXPECT_EQ(x, y);
    return;
  }
  if (type == DType::F16 || type == DType::BF16) {
    const double rel = type == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    for (size_t i = 0; i < x.size(); ++i) {
      // Values below half's normal range (2^-14) have an absolute error of at most 2^-25.
      const double allowed = std::max(rel * std::fabs(x[i]), std::ldexp(1.0, -25));
      ASSERT_LE(std::fabs(double(x[i]) - y[i]), allowed) << i << ": " << x[i];
    }
    return;
  }
  for (const Bound& b : kBounds) {
    if (b.type == type) {
      EXPECT_LT(rms, b.max_rms) << format_info(type).name;
      // The error is noise of about the step size, not zero: a format that stored the input
      // unchanged would point at a broken test.
      EXPECT_GT(rms, b.max_rms / 4) << format_info(type).name;
      return;
    }
  }
  FAIL() << "no bound for " << format_info(type).name;
}

// Gaussian weights with outliers (heavy tails make amax large relative to most values): the
// decoded values still lie within one step of the input, per element, for the formats whose
// step is known in closed form. (Not the K formats: their fitted sub-block scales may clip a
// few values on purpose, and are covered by the RMS bound above.)
class WithinOneStep : public testing::TestWithParam<Case> {};

TEST_P(WithinOneStep, GaussianWithOutliers) {
  const auto [type, isa] = GetParam();
  if (unavailable(isa)) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  std::vector<float> x = gaussian(kRow, 99, 0.02f);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 40.0f;  // outliers
  const std::vector<float> y = dequantize(type, isa, quantize(type, isa, x), kRow);
  const int64_t bs = format_info(type).block_size;
  // Per block: amax and range; the step is range / levels, plus the half-rounding of scales.
  for (int64_t b = 0; b < kRow / bs; ++b) {
    float lo = x[b * bs], hi = x[b * bs];
    for (int64_t j = 0; j < bs; ++j) {
      lo = std::min(lo, x[b * bs + j]);
      hi = std::max(hi, x[b * bs + j]);
    }
    const double amax = std::max(-lo, hi);
    double step = 0.0;
    switch (type) {
      case DType::Q8_0:
      case DType::Q8_1:
      case DType::Q8_K:
        step = amax / 127;
        break;
      case DType::Q5_0:
        step = amax / 16;
        break;
      case DType::Q4_0:
        step = amax / 8;
        break;
      case DType::Q5_1:
        step = (hi - lo) / 31;
        break;
      case DType::Q4_1:
        step = (hi - lo) / 15;
        break;
      default:
        FAIL();
    }
    for (int64_t j = 0; j < bs; ++j) {
      const size_t i = static_cast<size_t>(b * bs + j);
      ASSERT_LE(std::fabs(double(x[i]) - y[i]), step * 1.002 + 1e-7)
          << format_info(type).name << " block " << b << " element " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, RoundTrip,
                         testing::ValuesIn(cases_for(supported_types(), {Isa::Scalar, Isa::Avx2})),
                         case_name);

INSTANTIATE_TEST_SUITE_P(Formats, WithinOneStep,
                         testing::ValuesIn(cases_for({DType::Q8_0, DType::Q8_1, DType::Q8_K,
                                                      DType::Q5_0, DType::Q5_1, DType::Q4_0,
                                                      DType::Q4_1},
                                                     {Isa::Scalar, Isa::Avx2})),
                         case_name);

}  // namespace
}  // namespace squeeze::formats::test
