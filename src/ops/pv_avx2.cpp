// AVX2 twins of the kernels in pv_scalar.cpp, bit-identical to them (tests/ops checks).
// Compiled with AVX2/FMA/F16C flags; called only when the CPU has them (core/cpu.h).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "ops/pv.h"

namespace squeeze::ops {

namespace {

inline __m256 load_f16x8(const f16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// expf_ggml (ggml_math.h) on 8 lanes.
inline __m256 expf8(__m256 x) {
  const __m256 shift = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
  const __m256 n = _mm256_sub_ps(z, shift);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_set1_epi32(0x3f800000)));
  const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256 big = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 hi = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f));
  const __m256 lo = _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f));
  const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(hi, u, lo), u,
                                   _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  const __m256 normal = _mm256_fmadd_ps(j, k, k);
  if (_mm256_movemask_ps(big) == 0) return normal;
  const __m256i g = _mm256_and_si256(
      _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
      _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256 huge = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
  __m256 r = _mm256_blendv_ps(normal, scaled, big);
  return _mm256_blendv_ps(r, _mm256_mul_ps(s1, s1), huge);
}

// ((v0+v4) + (v2+v6)) + ((v1+v5) + (v3+v7)), as hsum8_movehl.
inline float hsum_movehl(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Partial k of eight columns: the sum of p[j] * v_j[0..8) over the rows j = k, k + np,
// k + 2 np, ... < n_kv, from zero and in row order, as the scalar kernel accumulates it. Kept in
// a register: the partials of a column block are summed as they come, without a buffer.
inline __m256 pv_partial8(const float* p, const f16_t* v, int64_t v_stride, const int32_t* rows,
                          int64_t n_kv, int64_t k, int np) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t j = k; j < n_kv; j += np) {
    acc = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), load_f16x8(v + rows[j] * v_stride), acc);
  }
  return acc;
}

}  // namespace

void pv_avx2(const float* p, const f16_t* v, int64_t v_stride, const int32_t* rows, int64_t n_kv,
             int head_dim, SumOrder order, float* partial, float* out) {
  const int np = n_partials(order);
  // Eight columns at a time, fold_partials' order lane by lane (a partial no row reaches is
  // zero, as the cleared buffer of the scalar kernel).
  int d = 0;
  for (; d + 8 <= head_dim; d += 8) {
    auto at = [&](int k) { return pv_partial8(p, v + d, v_stride, rows, n_kv, k, np); };
    __m256 r;
    if (order == SumOrder::TinyBlas) {
      const __m256 t0 = _mm256_add_ps(at(0), at(4)), t1 = _mm256_add_ps(at(1), at(5));
      const __m256 t2 = _mm256_add_ps(at(2), at(6)), t3 = _mm256_add_ps(at(3), at(7));
      r = _mm256_add_ps(_mm256_add_ps(t0, t2), _mm256_add_ps(t1, t3));
    } else {
      __m256 a[8];
      for (int l = 0; l < 8; ++l) {
        a[l] = _mm256_add_ps(_mm256_add_ps(at(l), at(16 + l)),
                             _mm256_add_ps(at(8 + l), at(24 + l)));
      }
      __m256 t[4];
      for (int l = 0; l < 4; ++l) t[l] = _mm256_add_ps(a[l], a[l + 4]);
      r = _mm256_add_ps(_mm256_add_ps(t[0], t[1]), _mm256_add_ps(t[2], t[3]));
    }
    _mm256_storeu_ps(out + d, r);
  }
  // Columns past the last multiple of 8: the scalar kernel's way, one column at a time.
  for (; d < head_dim; ++d) {
    std::memset(partial, 0, sizeof(float) * np);
    for (int64_t j = 0; j < n_kv; ++j) {
      float& acc = partial[j % np];
      acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(p[j]),
                                       _mm_cvtph_ps(_mm_cvtsi32_si128(v[rows[j] * v_stride + d])),
                                       _mm_set_ss(acc)));
    }
    out[d] = fold_partials(partial, 1, order);
  }
}

float dot_f16_ordered_avx2(const f16_t* a, const f16_t* b, int n, SumOrder order) {
  if (order == SumOrder::TinyBlas) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(load_f16x8(a + i), load_f16x8(b + i), acc);
    return hsum_movehl(acc);
  }
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  const int n_main = n & ~31;
  for (int i = 0; i < n_main; i += 32) {
    for (int r = 0; r < 4; ++r) {
      acc[r] = _mm256_fmadd_ps(load_f16x8(a + i + 8 * r), load_f16x8(b + i + 8 * r), acc[r]);
    }
  }
  float partial[32];
  for (int r = 0; r < 4; ++r) _mm256_storeu_ps(partial + 8 * r, acc[r]);
  double sum = fold_partials(partial, 1, order);
  for (int i = n_main; i < n; ++i) {
    sum += static_cast<double>(_cvtsh_ss(a[i]) * _cvtsh_ss(b[i]));
  }
  return static_cast<float>(sum);
}

void qk_f16_vecdot_avx2(const f16_t* q, const f16_t* k, int64_t k_stride, const int32_t* rows,
                        int64_t n_kv, int head_dim, float scale, float* scores) {
  if (head_dim > kPvF32MaxDim) {
    for (int64_t j = 0; j < n_kv; ++j) {
      scores[j] = scale * dot_f16_ordered_avx2(k + rows[j] * k_stride, q, head_dim, SumOrder::VecDotF16);
    }
    return;
  }
  alignas(32) float q32[kPvF32MaxDim];  // the query widened once (exact)
  for (int i = 0; i < head_dim; ++i) q32[i] = _cvtsh_ss(q[i]);
  const int n_main = head_dim & ~31;
  for (int64_t j = 0; j < n_kv; ++j) {
    const f16_t* kj = k + rows[j] * k_stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int i = 0; i < n_main; i += 32) {
      a0 = _mm256_fmadd_ps(load_f16x8(kj + i), _mm256_load_ps(q32 + i), a0);
      a1 = _mm256_fmadd_ps(load_f16x8(kj + i + 8), _mm256_load_ps(q32 + i + 8), a1);
      a2 = _mm256_fmadd_ps(load_f16x8(kj + i + 16), _mm256_load_ps(q32 + i + 16), a2);
      a3 = _mm256_fmadd_ps(load_f16x8(kj + i + 24), _mm256_load_ps(q32 + i + 24), a3);
    }
    // fold_partials' VecDotF16 order in registers: partial 8 r + l is lane l of a_r.
    const __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 u = _mm_hadd_ps(t, t);  // t0 + t1, t2 + t3
    double sum = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
    for (int i = n_main; i < head_dim; ++i) {
      sum += static_cast<double>(_cvtsh_ss(kj[i]) * q32[i]);
    }
    scores[j] = scale * static_cast<float>(sum);
  }
}

void qk_f32_tinyblas_avx2(const float* q, int n_q, const float* k, int64_t k_stride,
                          int64_t n_kv, int head_dim, float scale, float* scores,
                          int64_t scores_stride) {
  // Each key row is loaded once for the n_q (<= kQkMaxHeads) query heads of a GQA group, and
  // keys go in pairs: 2 * n_q independent accumulator chains, each in the single-query order.
  int64_t j = 0;
  for (; j + 2 <= n_kv; j += 2) {
    const float* k0 = k + j * k_stride;
    const float* k1 = k0 + k_stride;
    __m256 a0[kQkMaxHeads], a1[kQkMaxHeads];
    for (int h = 0; h < kQkMaxHeads; ++h) a0[h] = a1[h] = _mm256_setzero_ps();
    for (int d = 0; d < head_dim; d += 8) {
      const __m256 kd0 = _mm256_loadu_ps(k0 + d);
      const __m256 kd1 = _mm256_loadu_ps(k1 + d);
      for (int h = 0; h < kQkMaxHeads; ++h) {
        if (h < n_q) {
          const __m256 qd = _mm256_loadu_ps(q + h * head_dim + d);
          a0[h] = _mm256_fmadd_ps(kd0, qd, a0[h]);
          a1[h] = _mm256_fmadd_ps(kd1, qd, a1[h]);
        }
      }
    }
    for (int h = 0; h < n_q; ++h) {
      scores[h * scores_stride + j] = scale * hsum_movehl(a0[h]);
      scores[h * scores_stride + j + 1] = scale * hsum_movehl(a1[h]);
    }
  }
  for (; j < n_kv; ++j) {
    const float* kj = k + j * k_stride;
    __m256 acc[kQkMaxHeads];
    for (int h = 0; h < n_q; ++h) acc[h] = _mm256_setzero_ps();
    for (int d = 0; d < head_dim; d += 8) {
      const __m256 kd = _mm256_loadu_ps(kj + d);
      for (int h = 0; h < n_q; ++h) acc[h] = _mm256_fmadd_ps(kd, _mm256_loadu_ps(q + h * head_dim + d), acc[h]);
    }
    for (int h = 0; h < n_q; ++h) scores[h * scores_stride + j] = scale * hsum_movehl(acc[h]);
  }
}

void pv_f32_tinyblas_avx2(const float* p, int64_t p_stride, int n_q, const float* v,
                          int64_t v_stride, int64_t n_kv, int head_dim, float* out) {
  // Partial k of head h (the sum over rows j = k mod 8) in acc_mem[h][k]; each V row is loaded
  // once for the n_q heads, rows in order.
  alignas(32) float acc_mem[kQkMaxHeads * 8 * kPvF32MaxDim];
  const int hd = head_dim;
  for (int i = 0; i < n_q * 8 * hd; ++i) acc_mem[i] = 0.0f;
  for (int64_t j = 0; j < n_kv; ++j) {
    const float* vj = v + j * v_stride;
    for (int h = 0; h < n_q; ++h) {
      const __m256 pj = _mm256_set1_ps(p[h * p_stride + j]);
      float* a = acc_mem + (h * 8 + j % 8) * hd;
      for (int d = 0; d < hd; d += 8) {
        _mm256_store_ps(a + d, _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + d), _mm256_load_ps(a + d)));
      }
    }
  }
  // fold_partials' TinyBlas order, lane by lane.
  for (int h = 0; h < n_q; ++h) {
    const float* a = acc_mem + h * 8 * hd;
    for (int d = 0; d < hd; d += 8) {
      auto at = [&](int k) { return _mm256_load_ps(a + k * hd + d); };
      const __m256 t0 = _mm256_add_ps(at(0), at(4));
      const __m256 t1 = _mm256_add_ps(at(1), at(5));
      const __m256 t2 = _mm256_add_ps(at(2), at(6));
      const __m256 t3 = _mm256_add_ps(at(3), at(7));
      _mm256_storeu_ps(out + h * hd + d, _mm256_add_ps(_mm256_add_ps(t0, t2), _mm256_add_ps(t1, t3)));
    }
  }
}

void softmax_ggml_avx2(float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  const __m256 vmax = _mm256_set1_ps(max);
  double sum = 0.0;
  int64_t g = 0;
  for (; g + 8 <= n; g += 8) {
    const __m256 e = expf8(_mm256_sub_ps(_mm256_loadu_ps(x + g), vmax));
    _mm256_storeu_ps(x + g, e);
    sum += static_cast<double>(hsum_movehl(e));
  }
  if (g < n) {  // last group, padded with exp(-inf) = 0 as llama.cpp's masked cache is
    float buf[8];
    for (int l = 0; l < 8; ++l) buf[l] = g + l < n ? x[g + l] - max : -INFINITY;
    const __m256 e = expf8(_mm256_loadu_ps(buf));
    _mm256_storeu_ps(buf, e);
    for (int l = 0; g + l < n; ++l) x[g + l] = buf[l];
    sum += static_cast<double>(hsum_movehl(e));
  }
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / sum));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  for (; i < n; ++i) x[i] *= _mm256_cvtss_f32(inv);
}

void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 e = expf8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    float g[8] = {}, u[8] = {}, o[8];
    for (int64_t l = 0; i + l < n; ++l) g[l] = gate[i + l], u[l] = up[i + l];
    swiglu_avx2(g, u, 8, o);
    for (int64_t l = 0; i + l < n; ++l) out[i + l] = o[l];
  }
}

}  // namespace squeeze::ops
