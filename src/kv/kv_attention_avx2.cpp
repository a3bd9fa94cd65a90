// The AVX2 twin of decode attention over a quantized cache (kv_attention.h): codes unpacked 8
// at a time, the float loops widened by the compiler.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kv/kv_attention_impl.h"
#include "kv/kv_quant.h"

namespace squeeze::kv::detail {
namespace {

// Eight codes of `bits` starting at a byte boundary, as 32-bit lanes.
inline __m256i eight_codes(const uint8_t* p, int bits) {
  if (bits == 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  uint32_t w = 0;
  std::memcpy(&w, p, static_cast<size_t>(bits));  // 8 codes of 4 bits: 4 bytes; of 2 bits: 2
  const __m256i shifts = bits == 4 ? _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)
                                   : _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), shifts),
                          _mm256_set1_epi32((1 << bits) - 1));
}

// Eight codes as floats: the codes, or their levels (a 16-float table; codes of 4 bits pick from
// its two halves by their bit 3).
inline __m256 eight_floats(__m256i c, const float* levels) {
  if (levels == nullptr) return _mm256_cvtepi32_ps(c);
  const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(levels), c);
  const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(levels + 8), c);
  return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));
}

void unpack_codes(const uint8_t* codes, int64_t first, int64_t n, int bits, const float* levels, float* out) {
  int64_t i = 0;
  if ((first * bits) % 8 == 0) {
    const uint8_t* p = codes + first * bits / 8;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, eight_floats(eight_codes(p + i * bits / 8, bits), levels));
  }
  for (; i < n; ++i) out[i] = code_value(codes, first + i, bits, levels);
}

#include "kv/kv_attention_unit.h"

}  // namespace

void attend_units_avx2(const UnitShape& s, std::span<const Unit> units, int64_t per_thread,
                       ThreadPool& pool, float* scratch) {
  run_units(s, units, per_thread, pool, scratch);
}

}  // namespace squeeze::kv::detail
