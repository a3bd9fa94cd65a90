// k_orders.h's float steps for a repacked Q4_K matrix, 8 tokens at a time in the lanes of AVX
// registers (internal header of avx2_k.cpp and avx512_k.cpp): a vector fused multiply-add
// rounds each lane as the scalar one does, so every token gets exactly q4_k_repacked_pairs'
// result (tokens in whole groups of 4) or q4_k_repacked's (the rest).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace squeeze::formats::k_lanes {

class Q4kRepacked8 {
 public:
  // Tokens t0 .. t0 + 7 of a batch whose first n_grouped tokens are in whole groups of 4.
  Q4kRepacked8(int64_t t0, int64_t n_grouped) {
    alignas(32) int32_t mask[8];
    for (int j = 0; j < 8; ++j) mask[j] = t0 + j < n_grouped ? -1 : 0;
    grouped_ = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(mask)));
  }

  void reset() { acc_p_ = acc_min_p_ = acc_g_ = acc_min_g_ = _mm256_setzero_ps(); }

  // One super-block: the 8 tokens' exact int sums per pair of sub-blocks (sums[p], mins[p]),
  // d = d_w * d_x and dmin = dmin_w * d_x per token.
  void step(const __m256i sums[4], const __m256i mins[4], __m256 d, __m256 dmin) {
    __m256i all = sums[0], all_min = mins[0];
    for (int p = 1; p < 4; ++p) {
      all = _mm256_add_epi32(all, sums[p]);
      all_min = _mm256_add_epi32(all_min, mins[p]);
    }
    for (int p = 0; p < 4; ++p) {
      acc_p_ = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[p]), d, acc_p_);
      acc_min_p_ = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins[p]), dmin, acc_min_p_);
    }
    acc_g_ = _mm256_fmadd_ps(_mm256_cvtepi32_ps(all), d, acc_g_);
    acc_min_g_ = _mm256_fmadd_ps(_mm256_cvtepi32_ps(all_min), dmin, acc_min_g_);
  }

  // The first n_t tokens' results: y[j * y_stride].
  void store(float* y, int64_t y_stride, int n_t) const {
    alignas(32) float out[8];
    _mm256_store_ps(out, _mm256_blendv_ps(_mm256_sub_ps(acc_g_, acc_min_g_),
                                          _mm256_sub_ps(acc_p_, acc_min_p_), grouped_));
    for (int j = 0; j < n_t; ++j) y[j * y_stride] = out[j];
  }

 private:
  __m256 grouped_;
  __m256 acc_p_, acc_min_p_, acc_g_, acc_min_g_;  // pairs order, gemv order
};

}  // namespace squeeze::formats::k_lanes
