// Internal to the files compiled with the AMX flags (formats/amx_*.cpp, eval/machine_amx.cpp;
// never include it from others): the tile configuration and small helpers, in an unnamed
// namespace so that no AMX-compiled copy of them can be linked into code for other CPUs.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "formats/int8_panels.h"

namespace squeeze::formats::amx {
namespace {

using panels::transpose_dwords16;

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

}  // namespace
}  // namespace squeeze::formats::amx
