// vec_dot against the float dot product of the decoded weight row and the decoded activation
// row, on both ISAs.
#include <gtest/gtest.h>

#include <cmath>

#include "format_test_util.h"
#include "formats/blocks.h"
#include "formats/sq.h"

namespace squeeze::formats::test {
namespace {

// The min m of the weight block that holds each run of 32 elements, for the formats with
// x = d * q + m (Q4_1, Q5_1, the sq formats); empty for the others.
std::vector<float> mins_per_32(DType type, const std::vector<uint8_t>& w) {
  std::vector<float> mins;
  if (type == DType::Q4_1) {
    for (size_t b = 0; b < w.size() / sizeof(BlockQ4_1); ++b) {
      mins.push_back(f16_to_f32(reinterpret_cast<const BlockQ4_1*>(w.data())[b].m));
    }
  } else if (type == DType::Q5_1) {
    for (size_t b = 0; b < w.size() / sizeof(BlockQ5_1); ++b) {
      mins.push_back(f16_to_f32(reinterpret_cast<const BlockQ5_1*>(w.data())[b].m));
    }
  } else if (is_sq(type)) {
    const FormatInfo& info = format_info(type);
    std::vector<uint8_t> codes(static_cast<size_t>(info.block_size));
    for (size_t off = 0; off < w.size(); off += info.block_bytes) {
      float d, m;
      sq_unpack_block(type, w.data() + off, codes.data(), &d, &m);
      mins.insert(mins.end(), static_cast<size_t>(info.block_size / kBlock32), m);
    }
  }
  return mins;
}

// Dot products with Q8_1 activations use the activation's s = half(d * sum(q)) for the min
// term, where the decoded dot uses d * sum(q): the difference is exactly
// sum_b m_b * (s_b - d_b * sum(q_b)), which the bound allows for. Other pairings use only the
// values the decoders use.
double min_term_slack(const std::vector<float>& mins, const std::vector<uint8_t>& x) {
  const auto* xb = reinterpret_cast<const BlockQ8_1*>(x.data());
  double slack = 0.0;
  for (size_t b = 0; b < mins.size(); ++b) {
    int sum = 0;
    for (int8_t q : xb[b].qs) sum += q;
    const double exact = double(f16_to_f32(xb[b].d)) * sum;
    slack += std::fabs(mins[b]) * std::fabs(f16_to_f32(xb[b].s) - exact);
  }
  return slack;
}

class VecDot : public testing::TestWithParam<Case> {};

TEST_P(VecDot, EqualsTheDotOfTheDecodedRows) {
  const auto [type, isa] = GetParam();
  if (unavailable(isa)) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  const DType xtype = format_info(type).vec_dot_type;
  for (int64_t n : {format_info(type).block_size * 3, kRow, 4 * kRow}) {
    for (uint32_t seed : {41u, 42u}) {
      const auto w = quantize(type, isa, gaussian(n, seed, 0.05f));
      const auto x = quantize(xtype, isa, gaussian(n, seed + 7, 2.0f));
      const auto wd = dequantize(type, isa, w, n);
      const auto xd = dequantize(xtype, isa, x, n);
      double ref = 0.0;
      double magnitude = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        ref += double(wd[i]) * xd[i];
        magnitude += std::fabs(double(wd[i]) * xd[i]);
      }
      const double slack = min_term_slack(mins_per_32(type, w), x);
      const float got = kernels(type, isa).vec_dot(n, w.data(), x.data());
      EXPECT_NEAR(got, ref, 1e-5 * magnitude + slack)
          << format_info(type).name << " n=" << n << " seed=" << seed;
      // The comparison means something: the rows are not (near) zero.
      EXPECT_GT(magnitude, 1e-3 * static_cast<double>(n));
    }
  }
}

// A hand-checkable case: all weights decode to w, all activations to x, so the dot is n*w*x.
TEST_P(VecDot, ConstantRows) {
  const auto [type, isa] = GetParam();
  if (unavailable(isa)) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  const DType xtype = format_info(type).vec_dot_type;
  const int64_t n = kRow;
  const auto w = quantize(type, isa, std::vector<float>(n, 0.5f));
  const auto x = quantize(xtype, isa, std::vector<float>(n, -2.0f));
  const float got = kernels(type, isa).vec_dot(n, w.data(), x.data());
  EXPECT_NEAR(got, -1.0 * n, 1e-3 * n) << format_info(type).name;
}

INSTANTIATE_TEST_SUITE_P(Formats, VecDot,
                         testing::ValuesIn(cases_for(weight_types(), {Isa::Scalar, Isa::Avx2})),
                         case_name);

}  // namespace
}  // namespace squeeze::formats::test
