// Block layouts of the supported formats, byte for byte as ggml stores them (little-endian,
// no padding), so tensors in GGUF files written by llama.cpp can be read in place.
// (squeeze's own sq formats have a block size per format and no struct: see sq.h.)
//
// Notation below: a block holds elements x[0..QK); d, m, dmin are IEEE half scales (f16_t);
// "nibble" means 4 bits, low nibble first.
#pragma once

#include <cstdint>

#include "core/fp16.h"

namespace squeeze::formats {

constexpr int kBlock32 = 32;      // elements per block of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1
constexpr int kSuperBlock = 256;  // elements per super-block of Q4_K, Q6_K, Q8_K

// Q4_0: x[j] = d * (q[j] - 8), q in [0, 15].
// qs[j] holds q[j] in its low nibble and q[j + 16] in its high nibble.
struct BlockQ4_0 {
  f16_t d;
  uint8_t qs[kBlock32 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: x[j] = d * q[j] + m, q in [0, 15]; nibbles as in Q4_0.
struct BlockQ4_1 {
  f16_t d;
  f16_t m;
  uint8_t qs[kBlock32 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: x[j] = d * (q[j] - 16), q in [0, 31]. Low 4 bits as the nibbles of Q4_0; bit 4 of
// q[j] is bit j of the little-endian uint32 qh.
struct BlockQ5_0 {
  f16_t d;
  uint8_t qh[4];
  uint8_t qs[kBlock32 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: x[j] = d * q[j] + m, q in [0, 31]; bits as in Q5_0.
struct BlockQ5_1 {
  f16_t d;
  f16_t m;
  uint8_t qh[4];
  uint8_t qs[kBlock32 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Q8_0: x[j] = d * qs[j].
struct BlockQ8_0 {
  f16_t d;
  int8_t qs[kBlock32];
};
static_assert(sizeof(BlockQ8_0) == 34);

// SP8_50 (squeeze's, sparse.h): a block of Q8_0 with at most 16 non-zero codes. Bit j of the
// little-endian uint32 `mask` says x[j] is kept; the kept codes, in order of j, are qs[0..k)
// (k = popcount(mask) <= 16, qs[k..16) zero), x[j] = d * code. 22 bytes for 32 weights.
struct BlockSp8 {
  uint8_t mask[4];
  f16_t d;
  int8_t qs[kBlock32 / 2];
};
static_assert(sizeof(BlockSp8) == 22);

// Q8_1 (activations for Q4_1/Q5_1): x[j] = d * qs[j]; s = d * sum(qs), rounded to half, so
// the min term of a Q4_1 dot product costs one multiply per block.
struct BlockQ8_1 {
  f16_t d;
  f16_t s;
  int8_t qs[kBlock32];
};
static_assert(sizeof(BlockQ8_1) == 36);

// Q4_K: 8 sub-blocks of 32. Sub-block j has a 6-bit scale sc[j] and 6-bit min m[j] packed in
// `scales` (see q4k_scale_min); x = d*sc[j] * q - dmin*m[j], q in [0, 15].
// qs: four chunks of 32 bytes; chunk c holds sub-block 2c in the low nibbles and 2c+1 in the
// high nibbles.
struct BlockQ4_K {
  f16_t d;
  f16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kSuperBlock / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q6_K: 16 sub-blocks of 16, x = d * scales[j] * (q - 32), q in [0, 63].
// Two halves of 128 elements; in half h, with ql = ql + 64h, qh = qh + 32h, l in [0, 32):
//   q[l]      = (ql[l]      & 15) | ((qh[l] >> 0) & 3) << 4
//   q[l + 32] = (ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4
//   q[l + 64] = (ql[l]      >> 4) | ((qh[l] >> 4) & 3) << 4
//   q[l + 96] = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4
struct BlockQ6_K {
  uint8_t ql[kSuperBlock / 2];
  uint8_t qh[kSuperBlock / 4];
  int8_t scales[kSuperBlock / 16];
  f16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Q8_K (activations for the K formats): x[j] = d * qs[j] with a float d;
// bsums[g] = sum of qs[16g .. 16g+16), used for the min term of Q4_K.
struct BlockQ8_K {
  float d;
  int8_t qs[kSuperBlock];
  int16_t bsums[kSuperBlock / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// The 6-bit scale and min of Q4_K sub-block j (0..7) from the 12 packed bytes:
// j < 4: sc = bytes[j] & 63, m = bytes[j + 4] & 63;
// j >= 4: low 4 bits from bytes[j + 4] (sc low nibble, m high nibble), high 2 bits from the
// top bits of bytes[j - 4] (sc) and bytes[j] (m).
// (static: internal linkage, so the AVX2 units' copy is never shared with scalar callers.)
static inline void q4k_scale_min(int j, const uint8_t* bytes, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = bytes[j] & 63;
    *m = bytes[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((bytes[j + 4] & 0xF) | ((bytes[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((bytes[j + 4] >> 4) | ((bytes[j] >> 6) << 4));
  }
}

}  // namespace squeeze::formats
