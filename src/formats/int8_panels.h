// Internal to the AVX-512 and AMX kernel files (compiled with SQUEEZE_AVX512_FLAGS or more; never
// include it from others): int8 weights in 16-row panels laid out as AMX B tiles, which the AMX
// int8 tiles (amx_gemm.cpp) and the AVX-512 VNNI panel kernels (avx512_gemm.cpp) both read. In
// an unnamed namespace so that no copy compiled for these CPUs can be linked into other code.
//
// A panel is 16 weight rows; per block of 32 codes, one unit of kUnit bytes: the B tile (8 rows
// of 64 bytes: B row k holds codes 4k..4k+3 of each of the 16 weight rows, signed: Q4_0's q - 8,
// Q8_0's as stored), then d_w of the 16 rows as floats (0 past the matrix's last row).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "formats/blocks.h"

namespace squeeze::formats::panels {
namespace {

constexpr int kPanelRows = 16;
constexpr size_t kBytesB = 8 * 64;
constexpr size_t kUnit = kBytesB + 64;

// In-register transpose of a 16 x 16 matrix of dwords: a[k] becomes column k. Pairs of rows
// interleaved by dwords, then by quadwords (4 x 4 blocks transposed within each 128-bit lane),
// then the 4 x 4 grid of 128-bit lanes transposed.
inline void transpose16x16(__m512i (&a)[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1]);
  }
  // u[4 i + c], 128-bit lane L: column 4 L + c of rows 4 i .. 4 i + 3.
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    a[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    a[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    a[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    a[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// B row k (k < n_out) = dword k of each of the 16 rows at `rows` (row r at rows + r * 16
// dwords): the transpose of 4-byte groups that tdpb* / tdpbf16ps read, 64 bytes a B row.
inline void transpose_dwords16(const int32_t* rows, int n_out, uint8_t* dst) {
  __m512i a[16];
  for (int r = 0; r < 16; ++r) a[r] = _mm512_loadu_si512(rows + r * 16);
  transpose16x16(a);
  for (int k = 0; k < n_out; ++k) _mm512_storeu_si512(dst + k * 64, a[k]);
}

inline size_t panels_bytes(int64_t nb, int64_t n_rows) {
  return static_cast<size_t>((n_rows + kPanelRows - 1) / kPanelRows) * static_cast<size_t>(nb) * kUnit;
}

// Rows [0, n) (n <= 16) of a panel of a matrix of `Block`s, every block, into its units at dst;
// codes(block, out) writes a block's 32 signed codes.
template <typename Block, typename Codes>
inline void decode_panel(const uint8_t* w, size_t ws, int n, int64_t nb, uint8_t* dst, Codes codes) {
  alignas(64) int8_t rows[kPanelRows][64];  // codes in the first 32 bytes of each row
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* u = dst + i * kUnit;
    auto* dw = reinterpret_cast<float*>(u + kBytesB);
    for (int r = 0; r < kPanelRows; ++r) {
      if (r >= n) {
        std::memset(rows[r], 0, 32);
        dw[r] = 0.0f;
        continue;
      }
      const Block& b = reinterpret_cast<const Block*>(w + r * ws)[i];
      codes(b, rows[r]);
      dw[r] = _cvtsh_ss(b.d);
    }
    // B row k = dword k of every row (the upper 32 bytes of the rows are never stored).
    transpose_dwords16(reinterpret_cast<const int32_t*>(rows), 8, u);
  }
}

inline void decode_q4_0_panel(const uint8_t* w, size_t ws, int n, int64_t nb, uint8_t* dst) {
  decode_panel<BlockQ4_0>(w, ws, n, nb, dst, [](const BlockQ4_0& b, int8_t* out) {
    const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, low), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low), eight);
    _mm_store_si128(reinterpret_cast<__m128i*>(out), lo);
    _mm_store_si128(reinterpret_cast<__m128i*>(out + 16), hi);
  });
}

inline void decode_q8_0_panel(const uint8_t* w, size_t ws, int n, int64_t nb, uint8_t* dst) {
  decode_panel<BlockQ8_0>(w, ws, n, nb, dst,
                          [](const BlockQ8_0& b, int8_t* out) { std::memcpy(out, b.qs, 32); });
}

using PanelDecoder = void (*)(const uint8_t* w, size_t ws, int n, int64_t nb, uint8_t* dst);

}  // namespace
}  // namespace squeeze::formats::panels
