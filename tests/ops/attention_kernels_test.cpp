// The attention/activation kernels: AVX2 bit-identical to the scalar twins, and the scalar
// twins against their mathematical definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "random.h"
#include "ops/ggml_math.h"
#include "ops/pv.h"

namespace squeeze::ops {
namespace {

using testing::randn;

std::vector<f16_t> to_half(const std::vector<float>& v) {
  std::vector<f16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_f16(v[i]);
  return h;
}

bool have_avx2() { return cpu_has_avx2(); }

TEST(GgmlMath, ExpIsAccurate) {
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    const double ref = std::exp(static_cast<double>(x));
    ASSERT_NEAR(expf_ggml(x), ref, 4e-7 * ref) << x;
  }
  EXPECT_EQ(expf_ggml(-INFINITY), 0.0f);
  EXPECT_EQ(expf_ggml(0.0f), 1.0f);
  EXPECT_TRUE(std::isinf(expf_ggml(100.0f)));
  EXPECT_NEAR(silu_ggml(2.0f), 2.0 / (1.0 + std::exp(-2.0)), 1e-6);
}

TEST(GgmlMath, SoftmaxSumsToOneAndMatchesDefinition) {
  for (int64_t n : {1, 5, 8, 37, 300}) {
    auto x = randn(n, 3, 4.0f);
    const auto orig = x;
    softmax_ggml(x.data(), n);
    double mx = -1e300, sum = 0;
    for (float v : orig) mx = std::max(mx, double(v));
    for (float v : orig) sum += std::exp(v - mx);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(x[i], std::exp(orig[i] - mx) / sum, 1e-6);
  }
}

TEST(AttentionKernels, DotOrdersEqualTheFloatDot) {
  const auto a = randn(200, 1), b = randn(200, 2);
  const auto ha = to_half(a), hb = to_half(b);
  for (int n : {8, 64, 96, 200}) {
    double ref = 0;
    for (int i = 0; i < n; ++i) ref += double(f16_to_f32(ha[i])) * f16_to_f32(hb[i]);
    for (SumOrder o : {SumOrder::VecDotF16, SumOrder::TinyBlas}) {
      EXPECT_NEAR(dot_f16_ordered(ha.data(), hb.data(), n, o), ref, 1e-4) << n;
    }
  }
}

TEST(AttentionKernels, Avx2BitIdenticalToScalar) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2";
  const auto s = attention_kernels(Isa::Scalar);
  const auto v = attention_kernels(Isa::Avx2);
  for (int n : {8, 16, 64, 128, 200}) {
    const auto ha = to_half(randn(n, 10 + n)), hb = to_half(randn(n, 20 + n));
    for (SumOrder o : {SumOrder::VecDotF16, SumOrder::TinyBlas}) {
      ASSERT_EQ(s.dot_f16(ha.data(), hb.data(), n, o), v.dot_f16(ha.data(), hb.data(), n, o)) << n;
    }
  }
  for (int64_t n : {1, 7, 8, 9, 100, 513}) {
    auto x1 = randn(n, 5, 30.0f);  // wide range: covers the |n| > 126 branch of exp
    x1[0] = -200.0f;
    auto x2 = x1;
    s.softmax(x1.data(), n);
    v.softmax(x2.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x1[i], x2[i]) << n << " " << i;
    const auto g = randn(n, 6, 20.0f), u = randn(n, 7);
    std::vector<float> o1(n), o2(n);
    s.swiglu(g.data(), u.data(), n, o1.data());
    v.swiglu(g.data(), u.data(), n, o2.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(o1[i], o2[i]) << n << " " << i;
  }
  const int hd = 64;
  for (int64_t n_kv : {1, 5, 33, 100}) {
    auto p = randn(n_kv, 8);
    for (float& x : p) x = f16_to_f32(f32_to_f16(std::abs(x) / n_kv));
    const auto vv = to_half(randn(n_kv * 192, 9));
    std::vector<float> part(32 * hd), o1(hd), o2(hd);
    for (SumOrder o : {SumOrder::VecDotF16, SumOrder::TinyBlas}) {
      s.pv(p.data(), vv.data() + 64, 192, n_kv, hd, o, part.data(), o1.data());
      v.pv(p.data(), vv.data() + 64, 192, n_kv, hd, o, part.data(), o2.data());
      for (int d = 0; d < hd; ++d) {
        ASSERT_EQ(o1[d], o2[d]);
        double ref = 0;
        for (int64_t j = 0; j < n_kv; ++j) ref += double(p[j]) * f16_to_f32(vv[j * 192 + 64 + d]);
        ASSERT_NEAR(o1[d], ref, 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace squeeze::ops
