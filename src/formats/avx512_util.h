// Internal to the AVX-512 kernel files (avx512_*.cpp, compiled with SQUEEZE_AVX512_FLAGS; never
// include it from others): small helpers, in an unnamed namespace so that no AVX-512 copy of
// them can be linked into code for other CPUs.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "formats/avx2_util.h"

namespace squeeze::formats::avx512 {
namespace {

using avx2::half_to_float;
using avx2::hsum;

// Decode prefetches the same block of the same row this many tiles ahead (rows lie back to back).
constexpr size_t kPrefetchTiles = 4;

inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m256i load32(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Two halves broadcast: 8 lanes of a's value, then 8 of b's.
inline __m512 halves2(uint16_t a, uint16_t b) {
  const __m256i h = _mm256_setr_m128i(_mm_set1_epi16(static_cast<short>(a)),
                                      _mm_set1_epi16(static_cast<short>(b)));
  return _mm512_cvtph_ps(h);
}

// Nibbles of two blocks -> 64 codes in [0, 15]: block a's 32 in the low half (low nibbles
// first), b's in the high half.
inline __m512i unpack2(const uint8_t* a, const uint8_t* b) {
  const __m256i lo = _mm256_broadcastsi128_si256(load16(a));
  const __m256i hi = _mm256_broadcastsi128_si256(load16(b));
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  return _mm512_and_si512(_mm512_srlv_epi64(both, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                          _mm512_set1_epi8(0x0F));
}

inline __m512 dot_lanes(__m512i u, __m512i y) {
  return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, y));
}

// Half of a 512-bit accumulator summed as avx2::hsum sums an __m256.
inline float hsum_lo(__m512 v) { return hsum(_mm512_castps512_ps256(v)); }
inline float hsum_hi(__m512 v) {
  return hsum(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

// Sum of the 32 int8 of an activation block.
inline int32_t sum_i8(const int8_t* p) {
  const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), load32(p));
  return hsum(s);
}

// Lanes [0, n) of a 16-lane register (n <= 16).
inline __mmask16 first_lanes16(int n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// Decode streams the weights once: the tile kPrefetchTiles ahead (its rows lie back to back,
// tile_bytes in all) is prefetched a few cache lines per block, spread over the block loop.
class TilePrefetch {
 public:
  TilePrefetch(const uint8_t* tile, size_t tile_bytes, int64_t nb)
      : next_(reinterpret_cast<const char*>(tile) + kPrefetchTiles * tile_bytes),
        lines_(static_cast<int64_t>((tile_bytes + 63) / 64)),
        step_(nb > 0 ? (lines_ + nb - 1) / nb : 0) {}
  // Before block i.
  void at(int64_t i) const {
    for (int64_t l = i * step_; l < (i + 1) * step_ && l < lines_; ++l) _mm_prefetch(next_ + l * 64, _MM_HINT_T0);
  }

 private:
  const char* next_;
  int64_t lines_;
  int64_t step_;
};

// The 8 half-precision values at byte offsets offs[k] from p (each the first field of a
// block, d), converted: one gather instead of eight scalar inserts (those all compete for one
// shuffle port, which limited decode). Reads 4 bytes at each offset (d and the next field).
inline __m256 gather_halves(const uint8_t* p, __m256i offs, __m256i* raw) {
  *raw = _mm256_i32gather_epi32(reinterpret_cast<const int*>(p), offs, 1);
  return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(*raw));
}

inline __m256i row_offsets(size_t ws, const int (&order)[8]) {
  alignas(32) int32_t o[8];
  for (int k = 0; k < 8; ++k) o[k] = static_cast<int32_t>(order[k] * ws);
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(o));
}

}  // namespace
}  // namespace squeeze::formats::avx512
