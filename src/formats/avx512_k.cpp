// AVX-512 VNNI version of avx2_k.cpp's gemm_q4_k_repacked, bit for bit the same (the sums are
// exact integers whatever instructions form them; the float steps are k_orders.h's, 8 tokens in
// the lanes of one register): a pair of sub-blocks' 64 codes against each of 8 tokens' 64
// activations in one vpdpbusd, the 8 tokens' half sums transposed into two vectors of 8, the
// scales and mins applied to the 8 tokens at once.
// Called only after cpu_has_avx512() (core/cpu.h).
#include <algorithm>
#include <vector>

#include "formats/avx512_util.h"
#include "formats/blocks.h"
#include "formats/k_lanes.h"
#include "formats/k_orders.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx512 {
namespace {

inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }

// z[0..7]: 8 tokens' 16 int32 lanes (lanes 0-7: sub-block 2p's products, 8-15: 2p+1's). The
// 8 tokens' sums of lanes 0-7 (lo) and of lanes 8-15 (hi), each as one vector of 8 (exact).
inline void reduce8(const __m512i z[8], __m256i* lo, __m256i* hi) {
  __m512i a[4];
  for (int k = 0; k < 4; ++k) {
    a[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2 * k], z[2 * k + 1]),
                            _mm512_unpackhi_epi32(z[2 * k], z[2 * k + 1]));
  }
  // Per 128-bit lane L: b0 = the lane's sums of tokens 0..3, b1 of tokens 4..7.
  const __m512i b0 = _mm512_add_epi32(_mm512_unpacklo_epi64(a[0], a[1]), _mm512_unpackhi_epi64(a[0], a[1]));
  const __m512i b1 = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2], a[3]), _mm512_unpackhi_epi64(a[2], a[3]));
  // Lanes 0 + 1 are the low half, 2 + 3 the high half.
  const __m512i c0 = _mm512_add_epi32(b0, _mm512_shuffle_i64x2(b0, b0, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512i c1 = _mm512_add_epi32(b1, _mm512_shuffle_i64x2(b1, b1, _MM_SHUFFLE(2, 3, 0, 1)));
  *lo = _mm256_set_m128i(_mm512_castsi512_si128(c1), _mm512_castsi512_si128(c0));
  *hi = _mm256_set_m128i(_mm512_extracti32x4_epi32(c1, 2), _mm512_extracti32x4_epi32(c0, 2));
}

}  // namespace

void gemm_q4_k_repacked(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
                        size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  if (n_tokens < 4) {  // decode: gemv's order for every token, a row at a time (AVX2)
    avx2::gemm_q4_k_repacked(n, w, w_stride, n_rows, x, x_stride, n_tokens, y, y_stride);
    return;
  }
  const int64_t nb = n / kSuperBlock;
  const int64_t n_grouped = n_tokens - n_tokens % 4;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const auto token_block = [&](int64_t t, int64_t i) -> const BlockQ8_K& {
    return reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(x) + t * x_stride)[i];
  };
  // Per token group: each super-block's sub-block sums of the activations (bsums in pairs), as
  // vectors of the 8 tokens [nb][8 sub-blocks], and the 8 tokens' d.
  thread_local std::vector<int32_t> bsum32_store;  // [nb][8 sub-blocks][8 tokens]
  thread_local std::vector<float> xd_store;        // [nb][8 tokens]
  bsum32_store.resize(static_cast<size_t>(nb * 64));
  xd_store.resize(static_cast<size_t>(nb * 8));
  const auto bsum32 = [&](int64_t i, int sb) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsum32_store.data() + (i * 8 + sb) * 8));
  };
  const auto xd = [&](int64_t i) { return _mm256_loadu_ps(xd_store.data() + i * 8); };
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 8) {
    const int n_t = static_cast<int>(std::min<int64_t>(8, n_tokens - t0));
    // Tokens past n_tokens repeat the last one (their results are dropped).
    const BlockQ8_K* xr[8];
    for (int j = 0; j < 8; ++j) xr[j] = &token_block(t0 + std::min(j, n_t - 1), 0);
    for (int64_t i = 0; i < nb; ++i) {
      for (int j = 0; j < 8; ++j) {
        for (int sb = 0; sb < 8; ++sb) {
          bsum32_store[(i * 8 + sb) * 8 + j] = xr[j][i].bsums[2 * sb] + xr[j][i].bsums[2 * sb + 1];
        }
        xd_store[i * 8 + j] = xr[j][i].d;
      }
    }
    k_lanes::Q4kRepacked8 acc(t0, n_grouped);
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto* a = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w) + r * w_stride);
      acc.reset();
      for (int64_t i = 0; i < nb; ++i) {
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; ++j) q4k_scale_min(j, a[i].scales, &sc[j], &m[j]);
        __m256i sums[4], mins[4];
        for (int p = 0; p < 4; ++p) {
          // Sub-block 2p (low nibbles of bytes 32p..32p+31) in the low half, 2p+1 (high
          // nibbles) in the high half, against activations 64p..64p+63.
          const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs + 32 * p)));
          const __m512i codes = _mm512_and_si512(_mm512_srlv_epi64(raw, _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0)), low4);
          __m512i z[8];
          for (int j = 0; j < 8; ++j) z[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, load64(xr[j][i].qs + 64 * p));
          __m256i lo, hi;
          reduce8(z, &lo, &hi);
          sums[p] = _mm256_add_epi32(_mm256_mullo_epi32(lo, _mm256_set1_epi32(sc[2 * p])),
                                     _mm256_mullo_epi32(hi, _mm256_set1_epi32(sc[2 * p + 1])));
          mins[p] = _mm256_add_epi32(_mm256_mullo_epi32(bsum32(i, 2 * p), _mm256_set1_epi32(m[2 * p])),
                                     _mm256_mullo_epi32(bsum32(i, 2 * p + 1), _mm256_set1_epi32(m[2 * p + 1])));
        }
        acc.step(sums, mins, _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(a[i].d)), xd(i)),
                 _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(a[i].dmin)), xd(i)));
      }
      acc.store(y + t0 * y_stride + r, y_stride, n_t);
    }
  }
}

// avx2::gemm_q6_k (the tiled kernel's order from 8 tokens on) with the 8 tokens' sums formed as
// in gemm_q4_k_repacked: 64 codes (q in [0, 63]) per vpdpbusd, each 4-element lane times its
// sub-block's scale, the tokens' sums transposed into one vector; the 32 * sum(scale * bsum)
// offset per token from vectors of the 8 tokens' bsums. Bit-identical.
void gemm_q6_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
               size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  if (n_tokens < 8) {
    avx2::gemm_q6_k(n, w, w_stride, n_rows, x, x_stride, n_tokens, y, y_stride);
    return;
  }
  const int64_t nb = n / kSuperBlock;
  const auto token_block = [&](int64_t t, int64_t i) -> const BlockQ8_K& {
    return reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(x) + t * x_stride)[i];
  };
  thread_local std::vector<int32_t> bsum_store;  // [nb][16 sub-blocks][8 tokens]
  thread_local std::vector<float> xd_store;      // [nb][8 tokens]
  bsum_store.resize(static_cast<size_t>(nb * 128));
  xd_store.resize(static_cast<size_t>(nb * 8));
  // Lane l of chunk k (elements 64k + 4l .. + 3) belongs to sub-block 4k + l / 4.
  const __m512i lane_sub = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 8) {
    const int n_t = static_cast<int>(std::min<int64_t>(8, n_tokens - t0));
    const BlockQ8_K* xr[8];
    for (int j = 0; j < 8; ++j) xr[j] = &token_block(t0 + std::min(j, n_t - 1), 0);
    for (int64_t i = 0; i < nb; ++i) {
      for (int j = 0; j < 8; ++j) {
        for (int sb = 0; sb < 16; ++sb) bsum_store[(i * 16 + sb) * 8 + j] = xr[j][i].bsums[sb];
        xd_store[i * 8 + j] = xr[j][i].d;
      }
    }
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto* a = reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w) + r * w_stride);
      __m256 acc = _mm256_setzero_ps();
      for (int64_t i = 0; i < nb; ++i) {
        // The codes in element order, 64 per register, and each lane's scale.
        __m512i codes[4], lane_scale[4];
        for (int h = 0; h < 2; ++h) {
          __m256i q[4];
          avx2::q6_k_codes(a[i].ql, a[i].qh, h, q);
          codes[2 * h] = _mm512_inserti64x4(_mm512_castsi256_si512(q[0]), q[1], 1);
          codes[2 * h + 1] = _mm512_inserti64x4(_mm512_castsi256_si512(q[2]), q[3], 1);
        }
        const __m512i scales32 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i].scales)));
        for (int k = 0; k < 4; ++k) {
          lane_scale[k] = _mm512_permutexvar_epi32(_mm512_add_epi32(lane_sub, _mm512_set1_epi32(4 * k)), scales32);
        }
        __m512i z[8];
        for (int j = 0; j < 8; ++j) {
          __m512i t = _mm512_setzero_si512();
          for (int k = 0; k < 4; ++k) {
            const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[k], _mm512_loadu_si512(xr[j][i].qs + 64 * k));
            t = _mm512_add_epi32(t, _mm512_mullo_epi32(dot, lane_scale[k]));
          }
          z[j] = t;
        }
        __m256i lo, hi;
        reduce8(z, &lo, &hi);
        __m256i offset = _mm256_setzero_si256();
        for (int sb = 0; sb < 16; ++sb) {
          const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsum_store.data() + (i * 16 + sb) * 8));
          offset = _mm256_add_epi32(offset, _mm256_mullo_epi32(bs, _mm256_set1_epi32(a[i].scales[sb])));
        }
        const __m256i sumi = _mm256_sub_epi32(_mm256_add_epi32(lo, hi), _mm256_slli_epi32(offset, 5));
        const __m256 rr = _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(a[i].d)), _mm256_cvtepi32_ps(sumi));
        acc = _mm256_fmadd_ps(rr, _mm256_loadu_ps(xd_store.data() + i * 8), acc);
      }
      alignas(32) float out[8];
      _mm256_store_ps(out, acc);
      for (int j = 0; j < n_t; ++j) y[(t0 + j) * y_stride + r] = out[j];
    }
  }
}

}  // namespace squeeze::formats::avx512
