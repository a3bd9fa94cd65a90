// AVX-512 versions of a batch's attention kernels (pv.h), bit-identical to the scalar twins in
// TinyBlas order. Each output's arithmetic is the same sequence of float operations; only which
// outputs share a register changes:
//  - Q.K reads the keys in blocks of 16 transposed (widened once per batch), so a register holds
//    16 keys and partial l of all 16 (d = l, l + 8, ...) is one accumulator: the 8-lane sum and
//    its movehl tree become vertical adds, no horizontal reduction per output;
//  - P.V computes partial k (rows j = k mod 8, stored together) of up to 4 heads x 64 columns
//    in registers, one partial after the other, then folds the 8 partials in fold_partials'
//    order;
//  - the softmax computes exp on 16 lanes (two of ggml's 8-lane groups), each group's sum
//    still added to the double total in order.
// Compiled with the AVX-512 flags; called only when cpu_has_avx512() (core/cpu.h).
#include <immintrin.h>

#include <cmath>

#include "ops/pv.h"

namespace squeeze::ops {

namespace {

// expf_ggml (ggml_math.h) on 16 lanes: the operations of pv_avx2.cpp's expf8, lane for lane.
inline __m512 expf16(__m512 x) {
  const __m512 shift = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);
  const __m512 n = _mm512_sub_ps(z, shift);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512i e = _mm512_slli_epi32(_mm512_castps_si512(z), 23);
  const __m512 k = _mm512_castsi512_ps(_mm512_add_epi32(e, _mm512_set1_epi32(0x3f800000)));
  const __m512 abs_n = _mm512_abs_ps(n);
  const __mmask16 big = _mm512_cmp_ps_mask(abs_n, _mm512_set1_ps(126.0f), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 hi = _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f));
  const __m512 lo = _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f));
  const __m512 j = _mm512_fmadd_ps(_mm512_fmadd_ps(hi, u, lo), u,
                                   _mm512_mul_ps(_mm512_set1_ps(0x1.ffffecp-1f), b));
  const __m512 normal = _mm512_fmadd_ps(j, k, k);
  if (big == 0) return normal;
  const __mmask16 neg = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
  const __m512i g = _mm512_maskz_mov_epi32(neg, _mm512_set1_epi32(static_cast<int>(0x82000000u)));
  const __m512 s1 = _mm512_castsi512_ps(_mm512_add_epi32(g, _mm512_set1_epi32(0x7f000000)));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_sub_epi32(e, g));
  const __mmask16 huge = _mm512_cmp_ps_mask(abs_n, _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  const __m512 scaled = _mm512_mul_ps(_mm512_fmadd_ps(s2, j, s2), s1);
  const __m512 r = _mm512_mask_blend_ps(big, normal, scaled);
  return _mm512_mask_blend_ps(huge, r, _mm512_mul_ps(s1, s1));
}

// hsum8_movehl of an 8-lane group.
inline float hsum_movehl(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 lo8(__m512 v) { return _mm512_castps512_ps256(v); }
inline __m256 hi8(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// fold_partials' TinyBlas tree on whole registers: ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)).
inline __m512 fold8(const __m512 (&a)[8]) {
  const __m512 t0 = _mm512_add_ps(a[0], a[4]), t1 = _mm512_add_ps(a[1], a[5]);
  const __m512 t2 = _mm512_add_ps(a[2], a[6]), t3 = _mm512_add_ps(a[3], a[7]);
  return _mm512_add_ps(_mm512_add_ps(t0, t2), _mm512_add_ps(t1, t3));
}

// Scores of NQ heads against the 16 keys of block kb ([head_dim][16]) from key j0 (lanes past n
// are not stored).
template <int NQ>
inline void qk_block(const float* q, int head_dim, const float* kb, int64_t j0, int64_t n,
                     float scale, float* scores, int64_t scores_stride) {
  __m512 acc[NQ][8];
  for (int h = 0; h < NQ; ++h) {
    for (int l = 0; l < 8; ++l) acc[h][l] = _mm512_setzero_ps();
  }
  for (int d0 = 0; d0 < head_dim; d0 += 8) {
    for (int l = 0; l < 8; ++l) {
      __m512 k = _mm512_loadu_ps(kb + (d0 + l) * 16);
      // Keep the keys in a register: folded into each head's multiply-add, they would be
      // loaded NQ times (the loop is bound by loads, not multiply-adds).
      __asm__("" : "+v"(k));
      for (int h = 0; h < NQ; ++h) {
        acc[h][l] = _mm512_fmadd_ps(k, _mm512_set1_ps(q[h * head_dim + d0 + l]), acc[h][l]);
      }
    }
  }
  const __mmask16 m = first_lanes(n);
  const __m512 s = _mm512_set1_ps(scale);
  for (int h = 0; h < NQ; ++h) {
    _mm512_mask_storeu_ps(scores + h * scores_stride + j0, m, _mm512_mul_ps(s, fold8(acc[h])));
  }
}

// Partial k of NQ heads over NS 16-column slabs from column c0: rows j = k, k + 8, ... < n_kv
// (stored together from vk, head_dim floats apart), from zero, in row order; stored at
// part[(k * NQ + h) * head_dim + c].
template <int NQ, int NS>
inline void pv_partial(const float* p, int64_t p_stride, const float* vk, int64_t n_kv,
                       int head_dim, int c0, int k, float* part) {
  __m512 acc[NQ][NS];
  for (int h = 0; h < NQ; ++h) {
    for (int s = 0; s < NS; ++s) acc[h][s] = _mm512_setzero_ps();
  }
  __mmask16 mask[NS];
  for (int s = 0; s < NS; ++s) mask[s] = first_lanes(head_dim - c0 - 16 * s);
  const float* vj = vk + c0;
  for (int64_t j = k; j < n_kv; j += 8, vj += head_dim) {
    for (int s = 0; s < NS; ++s) {
      __m512 vs = _mm512_maskz_loadu_ps(mask[s], vj + 16 * s);
      __asm__("" : "+v"(vs));  // in a register, loaded once for the NQ heads (as k in qk_block)
      for (int h = 0; h < NQ; ++h) {
        acc[h][s] = _mm512_fmadd_ps(_mm512_set1_ps(p[h * p_stride + j]), vs, acc[h][s]);
      }
    }
  }
  for (int h = 0; h < NQ; ++h) {
    for (int s = 0; s < NS; ++s) {
      _mm512_mask_storeu_ps(part + (k * NQ + h) * head_dim + c0 + 16 * s, mask[s], acc[h][s]);
    }
  }
}

template <int NQ>
void pv_heads(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int64_t n_kv,
              int head_dim, float* out) {
  alignas(64) float part[8 * NQ * kPvF32MaxDim];
  // Up to 4 slabs (64 columns) a pass: at most 16 accumulators.
  for (int c0 = 0; c0 < head_dim; c0 += 64) {
    const int slabs = (head_dim - c0 + 15) / 16;
    for (int k = 0; k < 8; ++k) {
      const float* vk = v + k * v_stride * head_dim;
      switch (slabs) {
        case 1: pv_partial<NQ, 1>(p, p_stride, vk, n_kv, head_dim, c0, k, part); break;
        case 2: pv_partial<NQ, 2>(p, p_stride, vk, n_kv, head_dim, c0, k, part); break;
        case 3: pv_partial<NQ, 3>(p, p_stride, vk, n_kv, head_dim, c0, k, part); break;
        default: pv_partial<NQ, 4>(p, p_stride, vk, n_kv, head_dim, c0, k, part); break;
      }
    }
  }
  for (int h = 0; h < NQ; ++h) {
    for (int c = 0; c < head_dim; c += 16) {
      const __mmask16 m = first_lanes(head_dim - c);
      __m512 a[8];
      for (int k = 0; k < 8; ++k) a[k] = _mm512_maskz_loadu_ps(m, part + (k * NQ + h) * head_dim + c);
      _mm512_mask_storeu_ps(out + h * head_dim + c, m, fold8(a));
    }
  }
}

}  // namespace

void qk_f32_tinyblas_avx512(const float* q, int n_q, const float* kt, int64_t k_stride,
                            int64_t n_kv, int head_dim, float scale, float* scores,
                            int64_t scores_stride) {
  for (int64_t j0 = 0; j0 < n_kv; j0 += 16) {
    const int64_t n = n_kv - j0;
    const float* kb = kt + (j0 / 16) * k_stride;
    int h = 0;
    // Up to three heads share each key load (24 accumulators).
    for (; h + 3 <= n_q; h += 3) {
      qk_block<3>(q + h * head_dim, head_dim, kb, j0, n, scale, scores + h * scores_stride,
                  scores_stride);
    }
    if (n_q - h == 2) {
      qk_block<2>(q + h * head_dim, head_dim, kb, j0, n, scale, scores + h * scores_stride,
                  scores_stride);
    } else if (n_q - h == 1) {
      qk_block<1>(q + h * head_dim, head_dim, kb, j0, n, scale, scores + h * scores_stride,
                  scores_stride);
    }
  }
}

void qk_tokens_avx512(const float* q, int n_tok, int n_q, const int64_t* n_kv, const float* kt,
                      int64_t k_stride, int head_dim, float scale, float* scores,
                      int64_t scores_stride) {
  int64_t max_kv = 0;
  for (int t = 0; t < n_tok; ++t) max_kv = n_kv[t] > max_kv ? n_kv[t] : max_kv;
  const int64_t q_step = static_cast<int64_t>(n_q) * head_dim;
  const int64_t s_step = n_q * scores_stride;
  // Key blocks outer: a block (head_dim x 16 floats) stays in L1 while every token uses it.
  for (int64_t j0 = 0; j0 < max_kv; j0 += 16) {
    const float* kb = kt + (j0 / 16) * k_stride;
    for (int t = 0; t < n_tok; ++t) {
      if (n_kv[t] <= j0) continue;
      const int64_t n = n_kv[t] - j0;
      const float* qt = q + t * q_step;
      float* st = scores + t * s_step;
      int h = 0;
      for (; h + 3 <= n_q; h += 3) {
        qk_block<3>(qt + h * head_dim, head_dim, kb, j0, n, scale, st + h * scores_stride,
                    scores_stride);
      }
      if (n_q - h == 2) {
        qk_block<2>(qt + h * head_dim, head_dim, kb, j0, n, scale, st + h * scores_stride,
                    scores_stride);
      } else if (n_q - h == 1) {
        qk_block<1>(qt + h * head_dim, head_dim, kb, j0, n, scale, st + h * scores_stride,
                    scores_stride);
      }
    }
  }
}

void pv_f32_tinyblas_avx512(const float* p, int64_t p_stride, int n_q, const float* v,
                            int64_t v_stride, int64_t n_kv, int head_dim, float* out) {
  switch (n_q) {
    case 1: pv_heads<1>(p, p_stride, v, v_stride, n_kv, head_dim, out); break;
    case 2: pv_heads<2>(p, p_stride, v, v_stride, n_kv, head_dim, out); break;
    case 3: pv_heads<3>(p, p_stride, v, v_stride, n_kv, head_dim, out); break;
    default: pv_heads<4>(p, p_stride, v, v_stride, n_kv, head_dim, out); break;
  }
}

void softmax_ggml_avx512(float* x, int64_t n) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(x + i));
  float max = _mm512_reduce_max_ps(vmax);
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  const __m512 vm = _mm512_set1_ps(max);
  double sum = 0.0;
  for (int64_t g = 0; g < n; g += 16) {
    // Lanes past n are exp(-inf) = 0, as the padded last group of llama.cpp's masked cache.
    const __mmask16 m = first_lanes(n - g);
    const __m512 xs = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + g);
    const __m512 e = expf16(_mm512_sub_ps(xs, vm));
    _mm512_mask_storeu_ps(x + g, m, e);
    sum += static_cast<double>(hsum_movehl(lo8(e)));
    if (n - g > 8) sum += static_cast<double>(hsum_movehl(hi8(e)));
  }
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / sum));
  for (int64_t g = 0; g < n; g += 16) {
    const __mmask16 m = first_lanes(n - g);
    _mm512_mask_storeu_ps(x + g, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + g), inv));
  }
}

}  // namespace squeeze::ops
