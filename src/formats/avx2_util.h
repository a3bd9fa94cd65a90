// Internal: AVX2 helpers shared by the avx2_*.cpp kernels. Include only from translation units
// compiled with SQUEEZE_AVX2_FLAGS.
//
// Everything here is `static inline` (internal linkage) on purpose, and the AVX2 units call no
// inline function or template from other headers (core/fp16.h, <algorithm>): such functions
// become link-once symbols, and the linker could keep the AVX2-compiled copy for the scalar
// callers too, which would then crash on a CPU without AVX2.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace squeeze::formats::avx2 {

static inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

static inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

static inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// 16 bytes of nibbles -> 32 bytes in [0, 15]: low nibbles in bytes 0..15, high in 16..31.
// (The 16 bytes are broadcast to both halves by the load; one variable shift moves the high
// half's nibbles down.)
static inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4)),
                          _mm256_set1_epi8(0x0F));
}

// The 32 codes of an sq{B}_g{G} sub-block (layout in scalar_sq.cpp, docs/FORMATS.md) as bytes
// in element order.
template <int B>
static inline __m256i sq_sub_block_codes(const uint8_t* p) {
  if constexpr (B == 4) {
    return unpack_nibbles(p);
  } else {
    // 64-bit lane c (elements 8c..8c+7) takes bits 2c and 2c+1 of each of the 8 bytes.
    uint64_t low;
    std::memcpy(&low, p, sizeof low);
    const __m256i low2 = _mm256_and_si256(
        _mm256_srlv_epi64(_mm256_set1_epi64x(static_cast<long long>(low)),
                          _mm256_setr_epi64x(0, 2, 4, 6)),
        _mm256_set1_epi8(3));
    if constexpr (B == 2) {
      return low2;
    } else {
      // 32-bit lane c (elements 4c..4c+3) takes bit c of each of the 4 bytes, as bit 2.
      uint32_t high;
      std::memcpy(&high, p + 8, sizeof high);
      const __m256i bit = _mm256_and_si256(
          _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(high)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
          _mm256_set1_epi8(1));
      return _mm256_or_si256(low2, _mm256_slli_epi16(bit, 2));
    }
  }
}

// A half-precision value converted and broadcast to 8 floats.
static inline __m256 broadcast_half(uint16_t h) {
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(h)));
}

// 32 bits (little-endian at p) -> 32 bytes, 0xFF where the bit is set, else 0.
static inline __m256i expand_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, sizeof bits);
  const __m256i shuffle = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                            0x0101010101010101, 0x0000000000000000);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(bits)), shuffle);
  const __m256i bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);  // all bits but one per byte
  return _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit), _mm256_set1_epi64x(-1));
}

// Q5_0's 32 codes q - 16 in [-16, 15] in element order, from its nibbles qs and high bits qh:
// a clear bit 4 means q = nibble, i.e. nibble - 16 after the offset, so the top 4 bits are set.
static inline __m256i q5_0_codes(const uint8_t* qs, const uint8_t* qh) {
  const __m256i high = _mm256_andnot_si256(expand_bits(qh), _mm256_set1_epi8(static_cast<char>(0xF0)));
  return _mm256_or_si256(unpack_nibbles(qs), high);
}

// The 128 codes of half h of a Q6_K block (low bits ql, high bits qh) as four vectors of 32
// unsigned bytes in [0, 63]: q[k] holds elements 128h + 32k .. 128h + 32k + 31.
static inline void q6_k_codes(const uint8_t* ql, const uint8_t* qh, int h, __m256i* q) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i two = _mm256_set1_epi8(3);
  const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h));
  const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * h + 32));
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 32 * h));
  // Shifts are on 16-bit lanes; the masks keep each byte's own bits.
  const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hb, two), 4);
  const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), two), 4);
  const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), two), 4);
  const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), two), 4);
  q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), h0);
  q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), h1);
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), h2);
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), h3);
}

// Sums of 4 adjacent products u8 x i8 -> 8 int32. Exact while the sum of two adjacent
// products fits int16 (maddubs saturates): 2 * u * |y| <= 32767, e.g. u <= 128, |y| <= 127.
static inline __m256i dot_u8_i8(__m256i u, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

// Sums of 4 adjacent products i8 x i8 -> 8 int32 (x may be -128; y must not be).
static inline __m256i dot_i8_i8(__m256i x, __m256i y) {
  return dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// The 8 int8 at p, widened to floats.
static inline __m256 i8x8_to_ps(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Bytes 8c..8c+7 of v (c in 0..3) widened to floats.
static inline __m256 i8_chunk_to_ps(__m256i v, int c) {
  const __m128i half = c < 2 ? _mm256_castsi256_si128(v) : _mm256_extracti128_si256(v, 1);
  const __m128i part = (c & 1) ? _mm_srli_si128(half, 8) : half;
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
}

// Packs 4 x 8 int32 (each in [-128, 127]) into 32 int8 in order and stores them.
static inline void store_i8x32(int8_t* dst, __m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);      // a0-3 b0-3 | a4-7 b4-7
  const __m256i cd = _mm256_packs_epi32(c, d);      // c0-3 d0-3 | c4-7 d4-7
  const __m256i abcd = _mm256_packs_epi16(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  const __m256i ordered =
      _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), ordered);
}

}  // namespace squeeze::formats::avx2
