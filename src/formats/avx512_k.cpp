// AVX-512 VNNI version of avx2_k.cpp's gemm_q4_k_repacked, bit for bit the same (the sums are
// exact integers whatever instructions form them; the float steps are k_orders.h's, 8 tokens in
// the lanes of one register): a pair of sub-blocks' 64 codes against the token's 64 activations
// in one vpdpbusd, each half's 8 lanes summed, the scales applied to 8 tokens at once.
// Called only after cpu_has_avx512() (core/cpu.h).
#include <algorithm>

#include "formats/avx512_util.h"
#include "formats/blocks.h"
#include "formats/k_orders.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx512 {
namespace {

inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }

// The 8-lane sums of lo and hi (the low and high 256 bits) of z[0..3]: out_lo[p], out_hi[p].
inline void half_sums(const __m512i z[4], int32_t out_lo[4], int32_t out_hi[4]) {
  __m256i lo[4], hi[4];
  for (int p = 0; p < 4; ++p) {
    lo[p] = _mm512_castsi512_si256(z[p]);
    hi[p] = _mm512_extracti64x4_epi64(z[p], 1);
  }
  const auto hsum4 = [](const __m256i v[4], int32_t out[4]) {
    const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1)));
  };
  hsum4(lo, out_lo);
  hsum4(hi, out_hi);
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
  const auto as_ps = [](const int32_t* v) {
    return _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(v)));
  };
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 8) {
    const int n_t = static_cast<int>(std::min<int64_t>(8, n_tokens - t0));
    alignas(32) int32_t grouped_mask[8];
    for (int j = 0; j < 8; ++j) grouped_mask[j] = t0 + j < n_grouped ? -1 : 0;
    const __m256 grouped = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(grouped_mask)));
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto* a = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w) + r * w_stride);
      __m256 acc_p = _mm256_setzero_ps(), acc_min_p = _mm256_setzero_ps();  // pairs order
      __m256 acc_g = _mm256_setzero_ps(), acc_min_g = _mm256_setzero_ps();  // gemv order
      for (int64_t i = 0; i < nb; ++i) {
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; ++j) q4k_scale_min(j, a[i].scales, &sc[j], &m[j]);
        // Pair p: sub-block 2p (low nibbles of bytes 32p..32p+31) in the low half, 2p+1 (high
        // nibbles) in the high half, against activations 64p..64p+63.
        __m512i codes[4];
        for (int p = 0; p < 4; ++p) {
          const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs + 32 * p)));
          codes[p] = _mm512_and_si512(_mm512_srlv_epi64(raw, _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0)), low4);
        }
        alignas(32) int32_t lo[4][8] = {}, hi[4][8] = {}, mins[4][8] = {};
        alignas(32) float xd[8] = {};
        for (int j = 0; j < n_t; ++j) {
          const BlockQ8_K& b = token_block(t0 + j, i);
          __m512i z[4];
          for (int p = 0; p < 4; ++p) z[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[p], load64(b.qs + 64 * p));
          int32_t l4[4], h4[4];
          half_sums(z, l4, h4);
          for (int p = 0; p < 4; ++p) {
            lo[p][j] = l4[p];
            hi[p][j] = h4[p];
            mins[p][j] = m[2 * p] * (b.bsums[4 * p] + b.bsums[4 * p + 1]) +
                         m[2 * p + 1] * (b.bsums[4 * p + 2] + b.bsums[4 * p + 3]);
          }
          xd[j] = b.d;
        }
        // Per pair: sc_lo * lo + sc_hi * hi, 8 tokens at once (exact int32).
        alignas(32) int32_t sums[4][8], sum_all[8], min_all[8];
        __m256i all = _mm256_setzero_si256(), all_min = _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p) {
          const __m256i s = _mm256_add_epi32(
              _mm256_mullo_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(lo[p])), _mm256_set1_epi32(sc[2 * p])),
              _mm256_mullo_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(hi[p])), _mm256_set1_epi32(sc[2 * p + 1])));
          _mm256_store_si256(reinterpret_cast<__m256i*>(sums[p]), s);
          all = _mm256_add_epi32(all, s);
          all_min = _mm256_add_epi32(all_min, _mm256_load_si256(reinterpret_cast<const __m256i*>(mins[p])));
        }
        _mm256_store_si256(reinterpret_cast<__m256i*>(sum_all), all);
        _mm256_store_si256(reinterpret_cast<__m256i*>(min_all), all_min);
        const __m256 x_d = _mm256_load_ps(xd);
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(a[i].d)), x_d);
        const __m256 dmin = _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(a[i].dmin)), x_d);
        for (int p = 0; p < 4; ++p) {
          acc_p = _mm256_fmadd_ps(as_ps(sums[p]), d, acc_p);
          acc_min_p = _mm256_fmadd_ps(as_ps(mins[p]), dmin, acc_min_p);
        }
        acc_g = _mm256_fmadd_ps(as_ps(sum_all), d, acc_g);
        acc_min_g = _mm256_fmadd_ps(as_ps(min_all), dmin, acc_min_g);
      }
      alignas(32) float out[8];
      _mm256_store_ps(out, _mm256_blendv_ps(_mm256_sub_ps(acc_g, acc_min_g), _mm256_sub_ps(acc_p, acc_min_p), grouped));
      for (int j = 0; j < n_t; ++j) y[(t0 + j) * y_stride + r] = out[j];
    }
  }
}

}  // namespace squeeze::formats::avx512
