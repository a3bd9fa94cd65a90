// squeeze's own weight formats sq{B}_g{G}: B-bit asymmetric codes (B = 2, 3, 4) with one half
// scale d and min m per group of G = 32, 64 or 128 consecutive elements of a row,
// x = d * q + m, q in [0, 2^B - 1]. One block is one group: {half d; half m; G / 32 sub-blocks
// of 4 * B bytes}, B + 32 / G bits per weight. The bit layout inside a sub-block is in
// docs/FORMATS.md ("squeeze's formats"); the functions here pack and unpack it, so a quantizer
// (GPTQ, RTN) chooses codes and scales and never touches bits.
#pragma once

#include <cstdint>

#include "formats/format.h"

namespace squeeze::formats {

// Elements per sub-block: the unit the codes are packed in and the dot products step by (one
// Q8_1 activation block).
inline constexpr int64_t kSqSubBlock = 32;

// Whether `t` is one of the nine sq formats.
bool is_sq(DType t);
// Bits per code (2, 3, 4) and elements per group (32, 64, 128) of an sq format; both throw
// UsageError for another format.
int sq_bits(DType t);
int64_t sq_group(DType t);
// The sq format of `bits` and `group`; throws UsageError for a combination that has none.
DType sq_type(int bits, int64_t group);

// Writes one block (one group): d and m converted to half (round to nearest even; a caller that
// needs d * q + m to be exactly what it computed passes half-representable values), then the
// sq_group(t) codes, each < 2^sq_bits(t) (higher bits are dropped).
void sq_pack_block(DType t, float d, float m, const uint8_t* codes, void* dst);
// Reads one block: its sq_group(t) codes into codes[], its scale and min as floats. The element
// values are exactly *d * (float)codes[i] + *m (a multiply, then an add: no fused multiply-add).
void sq_unpack_block(DType t, const void* src, uint8_t* codes, float* d, float* m);

}  // namespace squeeze::formats
