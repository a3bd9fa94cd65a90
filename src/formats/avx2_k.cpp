// AVX2 kernels of Q4_K and Q6_K: decoding (bit-identical to scalar_k.cpp) and dot products with
// Q8_K activations. Per super-block the integer sum is exact (maddubs on unsigned codes, madd
// with the sub-block scales), then scaled once, as ggml's x86 kernels do.
#include <algorithm>
#include <cmath>
#include <vector>

#include "formats/avx2_util.h"
#include "formats/blocks.h"
#include "formats/k_lanes.h"
#include "formats/k_orders.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx2 {
namespace {

inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

void unpack_scales_q4_k(const BlockQ4_K& b, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 8; ++j) q4k_scale_min(j, b.scales, &sc[j], &m[j]);
}

inline void q6_k_codes(const BlockQ6_K& b, int h, __m256i* q) { avx2::q6_k_codes(b.ql, b.qh, h, q); }

}  // namespace

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(src);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    const float d = half_to_float(x[i].d);
    const float dmin = half_to_float(x[i].dmin);
    uint8_t sc[8], m[8];
    unpack_scales_q4_k(x[i], sc, m);
    float* y = dst + i * kSuperBlock;
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = load32(x[i].qs + 32 * c);
      const __m256i codes[2] = {_mm256_and_si256(raw, low4),
                                _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4)};
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * c + half;  // sub-block
        const __m256 dj = _mm256_set1_ps(d * sc[j]);
        const __m256 mj = _mm256_set1_ps(dmin * m[j]);
        for (int k = 0; k < 4; ++k) {
          const __m256 q = i8_chunk_to_ps(codes[half], k);
          _mm256_storeu_ps(y + 32 * j + 8 * k, _mm256_sub_ps(_mm256_mul_ps(dj, q), mj));
        }
      }
    }
  }
}

// Bit for bit ggml's ggml_vec_dot_q4_K_q8_K (AVX2): the scaled int sums in 8 lanes, each
// scaled and accumulated in float on its own; the mins as 4 lanes of pairs of sub-blocks
// (m[2k] * bsum32[2k] + m[2k + 1] * bsum32[2k + 1]), accumulated with -dmin; both summed at the end.
float vec_dot_q4_k(int64_t n, const void* w, const void* x) {
  const BlockQ4_K* a = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    uint8_t sc[8], m[8];
    unpack_scales_q4_k(a[i], sc, m);
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].bsums));
    const __m128i bsum32 = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
    const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)));
    const float dmin = -b[i].d * half_to_float(a[i].dmin);
    acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_madd_epi16(mins, bsum32)), acc_m);

    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = load32(a[i].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(raw, low4);                        // sub-block 2c
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);  // sub-block 2c+1
      const __m256i p_lo = _mm256_maddubs_epi16(lo, load32(b[i].qs + 64 * c));
      const __m256i p_hi = _mm256_maddubs_epi16(hi, load32(b[i].qs + 64 * c + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_madd_epi16(p_lo, _mm256_set1_epi16(sc[2 * c])),
                                                     _mm256_madd_epi16(p_hi, _mm256_set1_epi16(sc[2 * c + 1]))));
    }
    const float d = b[i].d * half_to_float(a[i].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
  acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
  return hsum(acc) + _mm_cvtss_f32(acc_m);
}

namespace {

// The sums of the 8 int32 lanes of each of v[0..3] (exact).
inline void hsum4(const __m256i v[4], int32_t out[4]) {
  const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1)));
}

// scalar_k.cpp's q4_k_pair_sums: the exact int sums per pair of sub-blocks, from vector lanes.
inline void q4_k_pair_sums(const BlockQ4_K& a, const BlockQ8_K& b, int32_t sums[4], int32_t mins[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256i lanes[4];
  uint8_t sc[8], m[8];
  unpack_scales_q4_k(a, sc, m);
  for (int p = 0; p < 4; ++p) {
    const __m256i raw = load32(a.qs + 32 * p);
    const __m256i lo = _mm256_and_si256(raw, low4);                        // sub-block 2p
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);  // sub-block 2p+1
    const __m256i p_lo = _mm256_maddubs_epi16(lo, load32(b.qs + 64 * p));
    const __m256i p_hi = _mm256_maddubs_epi16(hi, load32(b.qs + 64 * p + 32));
    lanes[p] = _mm256_add_epi32(_mm256_madd_epi16(p_lo, _mm256_set1_epi16(sc[2 * p])),
                                _mm256_madd_epi16(p_hi, _mm256_set1_epi16(sc[2 * p + 1])));
    mins[p] = m[2 * p] * (b.bsums[4 * p] + b.bsums[4 * p + 1]) +
              m[2 * p + 1] * (b.bsums[4 * p + 2] + b.bsums[4 * p + 3]);
  }
  hsum4(lanes, sums);
}

}  // namespace

// llama.cpp's orders (k_orders.h) over the int sums from vector lanes: scalar_k.cpp's twins,
// bit for bit.
float vec_dot_q4_k_repacked(int64_t n, const void* w, const void* x) {
  return k_orders::q4_k_repacked(n, w, x, q4_k_pair_sums);
}

float vec_dot_q4_k_repacked_pairs(int64_t n, const void* w, const void* x) {
  return k_orders::q4_k_repacked_pairs(n, w, x, q4_k_pair_sums);
}

float vec_dot_q4_k_tiled(int64_t n, const void* w, const void* x) {
  return k_orders::q4_k_tiled(n, w, x, q4_k_pair_sums);
}

// k_orders::gemm_in_groups_of_4, 8 tokens at a time: each weight super-block decoded once for
// the 8, their float steps in one register's lanes (k_lanes.h).
void gemm_q4_k_repacked(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
                        size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  if (n_tokens < 4) {  // decode: gemv's order for every token, a row at a time
    k_orders::gemm_in_groups_of_4(n, w, w_stride, n_rows, x, x_stride, n_tokens, y, y_stride,
                                  vec_dot_q4_k_repacked_pairs, vec_dot_q4_k_repacked);
    return;
  }
  const int64_t nb = n / kSuperBlock;
  const int64_t n_grouped = n_tokens - n_tokens % 4;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const auto token_block = [&](int64_t t, int64_t i) -> const BlockQ8_K& {
    return reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(x) + t * x_stride)[i];
  };
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 8) {
    const int n_t = static_cast<int>(std::min<int64_t>(8, n_tokens - t0));
    k_lanes::Q4kRepacked8 acc(t0, n_grouped);
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto* a = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w) + r * w_stride);
      acc.reset();
      for (int64_t i = 0; i < nb; ++i) {
        uint8_t sc[8], m[8];
        unpack_scales_q4_k(a[i], sc, m);
        __m256i lo[4], hi[4], scale_lo[4], scale_hi[4];
        for (int p = 0; p < 4; ++p) {
          const __m256i raw = load32(a[i].qs + 32 * p);
          lo[p] = _mm256_and_si256(raw, low4);
          hi[p] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
          scale_lo[p] = _mm256_set1_epi16(sc[2 * p]);
          scale_hi[p] = _mm256_set1_epi16(sc[2 * p + 1]);
        }
        alignas(32) int32_t sums[4][8] = {}, mins[4][8] = {};
        alignas(32) float xd[8] = {};
        for (int j = 0; j < n_t; ++j) {
          const BlockQ8_K& b = token_block(t0 + j, i);
          __m256i lanes[4];
          int32_t s4[4];
          for (int p = 0; p < 4; ++p) {
            const __m256i p_lo = _mm256_maddubs_epi16(lo[p], load32(b.qs + 64 * p));
            const __m256i p_hi = _mm256_maddubs_epi16(hi[p], load32(b.qs + 64 * p + 32));
            lanes[p] = _mm256_add_epi32(_mm256_madd_epi16(p_lo, scale_lo[p]), _mm256_madd_epi16(p_hi, scale_hi[p]));
            mins[p][j] = m[2 * p] * (b.bsums[4 * p] + b.bsums[4 * p + 1]) +
                         m[2 * p + 1] * (b.bsums[4 * p + 2] + b.bsums[4 * p + 3]);
          }
          hsum4(lanes, s4);
          for (int p = 0; p < 4; ++p) sums[p][j] = s4[p];
          xd[j] = b.d;
        }
        __m256i sv[4], mv[4];
        for (int p = 0; p < 4; ++p) {
          sv[p] = _mm256_load_si256(reinterpret_cast<const __m256i*>(sums[p]));
          mv[p] = _mm256_load_si256(reinterpret_cast<const __m256i*>(mins[p]));
        }
        const __m256 x_d = _mm256_load_ps(xd);
        acc.step(sv, mv, _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(a[i].d)), x_d),
                 _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(a[i].dmin)), x_d));
      }
      acc.store(y + t0 * y_stride + r, y_stride, n_t);
    }
  }
}

void gemm_q4_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
               size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  k_orders::gemm_tiled_from_8(n, w, w_stride, n_rows, x, x_stride, n_tokens, y, y_stride,
                              vec_dot_q4_k_tiled, vec_dot_q4_k);
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(src);
  const __m256i offset = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    const float d = half_to_float(x[i].d);
    float* y = dst + i * kSuperBlock;
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      q6_k_codes(x[i], h, q);
      for (int k = 0; k < 4; ++k) {
        const __m256i signed_q = _mm256_sub_epi8(q[k], offset);
        const int j = 8 * h + 2 * k;  // first of the two sub-blocks of 16 in this vector
        const __m256 d0 = _mm256_set1_ps(d * x[i].scales[j]);
        const __m256 d1 = _mm256_set1_ps(d * x[i].scales[j + 1]);
        float* out = y + 128 * h + 32 * k;
        _mm256_storeu_ps(out, _mm256_mul_ps(d0, i8_chunk_to_ps(signed_q, 0)));
        _mm256_storeu_ps(out + 8, _mm256_mul_ps(d0, i8_chunk_to_ps(signed_q, 1)));
        _mm256_storeu_ps(out + 16, _mm256_mul_ps(d1, i8_chunk_to_ps(signed_q, 2)));
        _mm256_storeu_ps(out + 24, _mm256_mul_ps(d1, i8_chunk_to_ps(signed_q, 3)));
      }
    }
  }
}

// sum_j scale_j * sum((q - 32) * q8) per super-block, in ggml's AVX2 lanes (bit for bit its
// ggml_vec_dot_q6_K_q8_K): lane l of the integer sum holds scale * q * q8 of elements 4l..4l+3 of
// each 32-element chunk (16 + 4l.. in the upper half), less 32 * (bsums[2l] * scales[2l] +
// bsums[2l + 1] * scales[2l + 1]); each lane is scaled and accumulated in float on its own, and
// the lanes are summed at the end. (Which elements share a lane decides the float roundings.)
namespace {

// ggml's lanes of a Q6_K x Q8_K super-block (see vec_dot_q6_k): 8 int32 lanes whose sum is the
// exact sum_j scale_j * sum((q - 32) * q8).
inline __m256i q6_k_lanes(const BlockQ6_K& a, const BlockQ8_K& b) {
  const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.scales));
  const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.bsums));
  const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bsums, _mm256_cvtepi8_epi16(scales)), 5);
  __m256i sumi = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    __m256i q[4];
    q6_k_codes(a, h, q);
    __m256i p[4];
    for (int k = 0; k < 4; ++k) {
      const __m256i q8 = load32(b.qs + 128 * h + 32 * k);
      const int j = 8 * h + 2 * k;
      const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(a.scales[j + 1]), _mm_set1_epi16(a.scales[j]));
      p[k] = _mm256_madd_epi16(scale, _mm256_maddubs_epi16(q[k], q8));
    }
    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[0], p[1]));
    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[2], p[3]));
  }
  return _mm256_sub_epi32(sumi, offset);
}

}  // namespace

// sum_j scale_j * sum((q - 32) * q8) per super-block, in ggml's AVX2 lanes (bit for bit its
// ggml_vec_dot_q6_K_q8_K): lane l of the integer sum holds scale * q * q8 of elements 4l..4l+3 of
// each 32-element chunk (16 + 4l.. in the upper half), less 32 * (bsums[2l] * scales[2l] +
// bsums[2l + 1] * scales[2l + 1]); each lane is scaled and accumulated in float on its own, and
// the lanes are summed at the end. (Which elements share a lane decides the float roundings.)
float vec_dot_q6_k(int64_t n, const void* w, const void* x) {
  const BlockQ6_K* a = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    const float d = b[i].d * half_to_float(a[i].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q6_k_lanes(a[i], b[i])), acc);
  }
  return hsum(acc);
}

float vec_dot_q6_k_tiled(int64_t n, const void* w, const void* x) {
  return k_orders::q6_k_tiled(n, w, x, [](const BlockQ6_K& a, const BlockQ8_K& b) { return hsum(q6_k_lanes(a, b)); });
}

// k_orders::gemm_tiled_from_8 with each weight super-block decoded once for all the tokens of
// a batch of 8 or more (the same int sums and float steps as vec_dot_q6_k_tiled per token).
void gemm_q6_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
               size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  if (n_tokens < 8) {
    k_orders::gemm_tiled_from_8(n, w, w_stride, n_rows, x, x_stride, n_tokens, y, y_stride,
                                vec_dot_q6_k_tiled, vec_dot_q6_k);
    return;
  }
  const int64_t nb = n / kSuperBlock;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(n_tokens));
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* a = reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w) + r * w_stride);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t i = 0; i < nb; ++i) {
      __m256i q[8], scale[8];
      q6_k_codes(a[i], 0, q);
      q6_k_codes(a[i], 1, q + 4);
      for (int k = 0; k < 8; ++k) {
        const int j = 2 * k;  // chunk k (32 elements) has the scales of sub-blocks 2k and 2k + 1
        scale[k] = _mm256_set_m128i(_mm_set1_epi16(a[i].scales[j + 1]), _mm_set1_epi16(a[i].scales[j]));
      }
      const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i].scales)));
      const float wd = f16_to_f32(a[i].d);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const BlockQ8_K& b = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(x) + t * x_stride)[i];
        const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.bsums));
        __m256i sumi = _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5);
        sumi = _mm256_sub_epi32(_mm256_setzero_si256(), sumi);
        for (int k = 0; k < 8; ++k) {
          sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale[k], _mm256_maddubs_epi16(q[k], load32(b.qs + 32 * k))));
        }
        acc[t] = std::fma(wd * static_cast<float>(hsum(sumi)), b.d, acc[t]);
      }
    }
    for (int64_t t = 0; t < n_tokens; ++t) y[t * y_stride + r] = acc[t];
  }
}

}  // namespace squeeze::formats::avx2
