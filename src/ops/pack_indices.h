// Internal: the indices of the set bits of 8-bit masks, written without a branch per index
// (a loop over the set bits mispredicts about once per 8 entries at 50% density, and was most
// of the thresholding time). Include only from AVX2 units (threshold_avx2.cpp,
// sparse_avx2.cpp): everything sits in an anonymous namespace, so each unit gets its own copy
// compiled for its ISA (see formats/avx2_util.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace squeeze::ops {
namespace {

// For each 8-bit mask: the positions of its set bits, ascending, one per nibble; the same
// plus 8h (h < 4: the mask is byte h of a 32-bit one) one per byte, the bytes past the count
// zero; and their count.
struct PackTable {
  uint32_t positions[256];
  uint64_t bytes[4][256];
  uint8_t count[256];
};

constexpr PackTable make_pack_table() {
  PackTable t{};
  for (unsigned m = 0; m < 256; ++m) {
    uint32_t packed = 0;
    int k = 0;
    for (unsigned b = 0; b < 8; ++b) {
      if ((m >> b) & 1) {
        packed |= b << (4 * k);
        for (unsigned h = 0; h < 4; ++h) t.bytes[h][m] |= uint64_t{8 * h + b} << (8 * k);
        ++k;
      }
    }
    t.positions[m] = packed;
    t.count[m] = static_cast<uint8_t>(k);
  }
  return t;
}

constexpr PackTable kPackTable = make_pack_table();

// Writes base + (the positions of mask's set bits) to out[0..count) and returns count; always
// stores 8 entries (those past count are garbage), so out needs room for 8.
inline int pack_indices8(unsigned mask, int32_t base, int32_t* out) {
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i pos = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(kPackTable.positions[mask])), shifts),
      _mm256_set1_epi32(15));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm256_add_epi32(pos, _mm256_set1_epi32(base)));
  return kPackTable.count[mask];
}

}  // namespace
}  // namespace squeeze::ops
