// AMX inner loops of the machine probe: tile products into four independent C tiles (so their
// latency overlaps), operands loaded once. Compiled with the AMX flags; called only after
// cpu_has_amx() (which asked the kernel for the tile state). Intrinsics alone.
#include <immintrin.h>

#include <cstring>

#include "eval/machine_kernels.h"
#include "formats/amx_util.h"

namespace squeeze::eval::detail {

namespace {

using formats::amx::configure_tiles;

// Tiles 0-3 C, 4-5 A, 6-7 B: all 16 rows x 64 bytes, A and B filled with `fill`, C zero.
void configure_full_tiles(const void* fill) {
  const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
  const uint16_t colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
  configure_tiles(8, rows, colsb);
  _tile_loadd(4, fill, 64);
  _tile_loadd(5, fill, 64);
  _tile_loadd(6, fill, 64);
  _tile_loadd(7, fill, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// Stores the four C tiles, hands the tile state back, and returns a value of all four.
template <typename T>
T finish(T (&c)[4][16 * 16]) {
  _tile_stored(0, c[0], 64);
  _tile_stored(1, c[1], 64);
  _tile_stored(2, c[2], 64);
  _tile_stored(3, c[3], 64);
  formats::amx::release_tiles();
  return c[0][0] + c[1][17] + c[2][34] + c[3][255];
}

}  // namespace

int32_t amx_int8_loop(int64_t iters, int32_t x) {
  alignas(64) int8_t fill[16 * 64];
  std::memset(fill, static_cast<int8_t>(1 + (x & 3)), sizeof fill);
  configure_full_tiles(fill);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  alignas(64) int32_t c[4][16 * 16];
  return finish(c);
}

float amx_bf16_loop(int64_t iters, float x) {
  alignas(64) uint16_t fill[16 * 32];
  const uint16_t one = x > 0.0f ? 0x3F80 : 0xBF80;  // bf16 +-1
  for (uint16_t& v : fill) v = one;
  configure_full_tiles(fill);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float c[4][16 * 16];
  return finish(c);
}

}  // namespace squeeze::eval::detail
