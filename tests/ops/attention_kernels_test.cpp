// The attention/activation kernels: AVX2 bit-identical to the scalar twins, and the scalar
// twins against their mathematical definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
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

// Rows 0..n-1 in order (a contiguous cache).
std::vector<int32_t> iota_rows(int64_t n) {
  std::vector<int32_t> r(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) r[j] = static_cast<int32_t>(j);
  return r;
}

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
    const auto rows = iota_rows(n_kv);
    std::vector<float> part(32 * hd), o1(hd), o2(hd);
    for (SumOrder o : {SumOrder::VecDotF16, SumOrder::TinyBlas}) {
      s.pv(p.data(), vv.data() + 64, 192, rows.data(), n_kv, hd, o, part.data(), o1.data());
      v.pv(p.data(), vv.data() + 64, 192, rows.data(), n_kv, hd, o, part.data(), o2.data());
      for (int d = 0; d < hd; ++d) {
        ASSERT_EQ(o1[d], o2[d]);
        double ref = 0;
        for (int64_t j = 0; j < n_kv; ++j) ref += double(p[j]) * f16_to_f32(vv[j * 192 + 64 + d]);
        ASSERT_NEAR(o1[d], ref, 1e-5);
      }
    }
  }
}

// Decode's per-head Q.K equals one VecDotF16 dot per cache row, and P.V keeps the scalar order
// for head sizes with and without a tail past the last multiple of 8 or of 32.
TEST(AttentionKernels, DecodeKernelsEqualTheScalarDots) {
  const auto s = attention_kernels(Isa::Scalar);
  std::vector<Isa> isas = {Isa::Scalar};
  if (have_avx2()) isas.push_back(Isa::Avx2);
  for (int hd : {8, 12, 40, 64, 96, 128}) {
    for (int64_t n_kv : {1, 7, 32, 33, 100}) {
      const int64_t stride = 3 * hd;
      const auto kh = to_half(randn(n_kv * stride, 61 + n_kv));
      const auto vh = to_half(randn(n_kv * stride, 71 + n_kv));
      const auto qh = to_half(randn(hd, 81 + hd));
      auto p = randn(n_kv, 91);
      const auto rows = iota_rows(n_kv);
      for (float& x : p) x = f16_to_f32(f32_to_f16(std::abs(x) / n_kv));
      for (Isa isa : isas) {
        const auto a = attention_kernels(isa);
        if (hd % 8 == 0) {
          std::vector<float> scores(n_kv);
          a.qk_f16(qh.data(), kh.data() + hd, stride, rows.data(), n_kv, hd, 0.125f, scores.data());
          for (int64_t j = 0; j < n_kv; ++j) {
            const float want = 0.125f * s.dot_f16(kh.data() + j * stride + hd, qh.data(), hd,
                                                  SumOrder::VecDotF16);
            ASSERT_EQ(scores[j], want) << hd << " " << n_kv << " " << j;
          }
        }
        std::vector<float> part(32 * hd), o1(hd), o2(hd);
        for (SumOrder o : {SumOrder::VecDotF16, SumOrder::TinyBlas}) {
          s.pv(p.data(), vh.data() + hd, stride, rows.data(), n_kv, hd, o, part.data(), o1.data());
          a.pv(p.data(), vh.data() + hd, stride, rows.data(), n_kv, hd, o, part.data(), o2.data());
          for (int d = 0; d < hd; ++d) ASSERT_EQ(o1[d], o2[d]) << hd << " " << n_kv << " " << d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace squeeze::ops

namespace squeeze::ops {
namespace {

// The batch kernels on widened (float) K / V equal the half-precision scalar kernels in
// TinyBlas order bit for bit, for 1..4 query heads sharing the rows.
// Every ISA this CPU has with batch kernels (AVX2, AVX-512), by name.
std::vector<Isa> batch_isas() {
  std::vector<Isa> isas;
  if (cpu_has_avx2()) isas.push_back(Isa::Avx2);
  if (cpu_has_avx512()) isas.push_back(Isa::Avx512);
  return isas;
}

TEST(AttentionKernels, WidenedBatchKernelsEqualScalarTinyBlas) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  const auto s = attention_kernels(Isa::Scalar);
  for (Isa isa : batch_isas()) {
  SCOPED_TRACE(std::string(isa_name(isa)));
  const auto v = attention_kernels(isa);
  ASSERT_NE(v.qk_f32, nullptr);
  for (int hd : {8, 24, 64, 128, 256}) {
    for (int64_t n_kv : {1, 7, 8, 9, 16, 17, 70, 130}) {
      const int64_t stride = 3 * hd;
      std::vector<f16_t> kh(n_kv * stride), vh(n_kv * stride);
      const auto kr = randn(n_kv * stride, 31 + n_kv), vr = randn(n_kv * stride, 41 + n_kv);
      for (size_t i = 0; i < kh.size(); ++i) kh[i] = f32_to_f16(kr[i]), vh[i] = f32_to_f16(vr[i]);
      std::vector<float> k32(kh.size()), v32(vh.size());
      for (size_t i = 0; i < kh.size(); ++i) k32[i] = f16_to_f32(kh[i]), v32[i] = f16_to_f32(vh[i]);
      for (int n_q = 1; n_q <= kQkMaxHeads; ++n_q) {
        std::vector<f16_t> qh(n_q * hd);
        const auto qr = randn(n_q * hd, 51 + n_q);
        std::vector<float> q32(n_q * hd);
        for (int i = 0; i < n_q * hd; ++i) qh[i] = f32_to_f16(qr[i]), q32[i] = f16_to_f32(qh[i]);
        const float scale = 0.125f;
        std::vector<float> scores(n_q * n_kv);
        const auto rows = iota_rows(n_kv);
        if (v.kv_blocked) {
          std::vector<float> kt((n_kv + 15) / 16 * 16 * hd);
          widen_key_blocks(kh.data() + hd, stride, rows.data(), n_kv, hd, kt.data());
          v.qk_f32(q32.data(), n_q, kt.data(), 16 * hd, n_kv, hd, scale, scores.data(), n_kv);
        } else {
          v.qk_f32(q32.data(), n_q, k32.data() + hd, stride, n_kv, hd, scale, scores.data(), n_kv);
        }
        std::vector<float> p(n_q * n_kv);
        for (int h = 0; h < n_q; ++h) {
          for (int64_t j = 0; j < n_kv; ++j) {
            const float want = scale * s.dot_f16(kh.data() + j * stride + hd, qh.data() + h * hd, hd,
                                                 SumOrder::TinyBlas);
            ASSERT_EQ(scores[h * n_kv + j], want) << hd << " " << n_kv << " " << n_q;
            p[h * n_kv + j] = f16_to_f32(f32_to_f16(std::abs(qr[(h * 7 + j) % qr.size()]) / n_kv));
          }
        }
        std::vector<float> out(n_q * hd), want(hd), part(32 * hd);
        if (v.kv_blocked) {  // by partials: row j = 8 i + r at (r * rows8 + i) * hd
          const int64_t rows8 = (n_kv + 7) / 8;
          std::vector<float> vb(8 * rows8 * hd);
          for (int64_t j = 0; j < n_kv; ++j) {
            for (int d = 0; d < hd; ++d) vb[((j % 8) * rows8 + j / 8) * hd + d] = v32[j * stride + hd + d];
          }
          v.pv_f32(p.data(), n_kv, n_q, vb.data(), rows8, n_kv, hd, out.data());
        } else {
          v.pv_f32(p.data(), n_kv, n_q, v32.data() + hd, stride, n_kv, hd, out.data());
        }
        for (int h = 0; h < n_q; ++h) {
          s.pv(p.data() + h * n_kv, vh.data() + hd, stride, rows.data(), n_kv, hd, SumOrder::TinyBlas,
               part.data(), want.data());
          for (int d = 0; d < hd; ++d) ASSERT_EQ(out[h * hd + d], want[d]) << hd << " " << n_kv;
        }
      }
    }
  }
  }
}

TEST(AttentionKernels, Avx512SoftmaxBitIdenticalToScalar) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512";
  const auto s = attention_kernels(Isa::Scalar);
  const auto v = attention_kernels(Isa::Avx512);
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 24, 100, 513}) {
    auto x1 = randn(n, 15 + n, 30.0f);  // wide range: covers the |n| > 126 branch of exp
    x1[0] = -200.0f;
    auto x2 = x1;
    s.softmax(x1.data(), n);
    v.softmax(x2.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x1[i], x2[i]) << n << " " << i;
  }
}

}  // namespace
}  // namespace squeeze::ops
