// Internal to the files compiled with the AMX flags (formats/amx_*.cpp, eval/machine_amx.cpp;
// never include it from others): the tile configuration and small helpers, in an unnamed
// namespace so that no AMX-compiled copy of them can be linked into code for other CPUs.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace squeeze::formats::amx {
namespace {

constexpr int kTile = 16;           // tokens and weight rows per tile
constexpr int64_t kMinTokens = 16;  // fewer: the AVX-512 kernels

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Tile t of `n` (<= 8) gets rows[t] rows of colsb[t] bytes. Loads this thread's tile
// configuration; release_tiles() hands the state back.
inline void configure_tiles(int n, const uint8_t* rows, const uint16_t* colsb) {
  TileConfig c{};
  c.palette_id = 1;
  for (int t = 0; t < n; ++t) c.rows[t] = rows[t], c.colsb[t] = colsb[t];
  // GCC's _tile_loadconfig tells the compiler it reads only the first 8 bytes of the
  // configuration, so the stores above could be dropped as dead: make them visible first.
  __asm__ __volatile__("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}

inline void release_tiles() { _tile_release(); }

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline float half(uint16_t h) { return _cvtsh_ss(h); }

// Lanes [0, n) of a 16-lane register.
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

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

}  // namespace
}  // namespace squeeze::formats::amx
