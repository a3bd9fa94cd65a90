// AMX (Intel Advanced Matrix Extensions) versions of the tiled products, for batches of tokens.
//
// One int8 tile product (tdpbssd) computes a 16 tokens x 16 weight rows block of exact int32
// dot products over 32 codes: one ggml block. Each block's sums are then scaled and added in
// float with AVX-512, in block order, per output:
//   acc = fma(float(sum_b), d_w,b * d_x,b, acc)
// which is the order of llama.cpp's repacked Q4_0 kernels (vec_dot_q4_0_repacked): the AMX
// Q4_0 product gives the same bits as the AVX-512 and AVX2 ones, and as llama.cpp's.
//
// Tiles: 0, 1 hold C (16 tokens x 16 int32); 2, 3 A (16 tokens x 32 activation codes, read
// straight from the Q8_0 rows with the row stride); 4, 5 B (8 x 64 bytes: 16 weight rows' 32
// codes in groups of 4, tdpbssd's layout). Weights are decoded into B tiles once per call,
// 16 rows (a panel) at a time, and reused by every token tile. Called only after cpu_has_amx()
// (core/cpu.h), which asked the kernel for the tile state.
//
// Only intrinsics and this file's own internal functions: no inline function or template from
// another header (std::min, std::vector, ...), whose AMX-compiled copy the linker could hand to
// code that runs on CPUs without AVX-512. Buffers come from scratch_buffer (format.cpp).
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "formats/amx_util.h"
#include "formats/blocks.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::amx {
namespace {

constexpr size_t kBTileBytes = 8 * 64;    // one block of a panel

// C: tiles 0, 1 (16 tokens x 16 int32); A: 2, 3 (16 tokens x 32 codes); B: 4, 5 (8 x 64 bytes).
void configure_int8_tiles() {
  const uint8_t rows[6] = {kTile, kTile, kTile, kTile, 8, 8};
  const uint16_t colsb[6] = {kTile * sizeof(int32_t), kTile * sizeof(int32_t), 32, 32, 64, 64};
  configure_tiles(6, rows, colsb);
}

// The decoded weights of one call: n_panels panels of nb B tiles each, and the rows' d_w per
// block ([panel][block][16], 0 for the rows past the last one).
struct Panels {
  int8_t* codes;
  float* dw;
};

// Rows [r0, r0 + n) (n <= 16) of a Q4_0 matrix, block i, decoded into one B tile at dst:
// byte 4 * r + j of row k is code 4 * k + j of weight row r, as (q - 8).
void decode_q4_0_panel_block(const uint8_t* w, size_t ws, int n, int64_t i, int8_t* dst,
                             float* dw) {
  alignas(64) int8_t rows[kTile][64];  // codes in the first 32 bytes of each row
  const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int r = 0; r < kTile; ++r) {
    if (r >= n) {
      std::memset(rows[r], 0, 32);
      dw[r] = 0.0f;
      continue;
    }
    const auto* b = reinterpret_cast<const BlockQ4_0*>(w + r * ws) + i;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, low), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low), eight);
    _mm_store_si128(reinterpret_cast<__m128i*>(rows[r]), lo);
    _mm_store_si128(reinterpret_cast<__m128i*>(rows[r] + 16), hi);
    dw[r] = half(b->d);
  }
  // B row k = dword k of every row (the upper 32 bytes of the rows are never stored).
  transpose_dwords16(reinterpret_cast<const int32_t*>(rows), 8, reinterpret_cast<uint8_t*>(dst));
}

void decode_q4_0(const uint8_t* w, size_t ws, int64_t n_rows, int64_t nb, const Panels& p) {
  const int64_t n_panels = (n_rows + kTile - 1) / kTile;
  for (int64_t pi = 0; pi < n_panels; ++pi) {
    const int n = static_cast<int>(min64(kTile, n_rows - pi * kTile));
    const uint8_t* wp = w + pi * kTile * ws;
    for (int64_t i = 0; i < nb; ++i) {
      const size_t at = static_cast<size_t>(pi * nb + i);
      decode_q4_0_panel_block(wp, ws, n, i, p.codes + at * kBTileBytes, p.dw + at * kTile);
    }
  }
}

// acc[t] += float(C[t]) * (d_x[t] * d_w) for the 16 tokens t of one block's C tile.
inline void scale_add(const int32_t* c, const float* dx, __m512 dw, __m512 (&acc)[kTile]) {
  for (int t = 0; t < kTile; ++t) {
    const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(dx[t]));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + t * kTile)), s, acc[t]);
  }
}

// One token tile (16 Q8_0 rows at x, stride xs; dx[block][16]) against one panel: y rows of the
// first n_tok tokens, columns r0 .. r0 + n_rows.
void tile_q8(int64_t nb, const uint8_t* x, size_t xs, const float* dx, const int8_t* codes,
             const float* dw, int n_tok, int n_rows, float* y, int64_t ys) {
  alignas(64) int32_t c0[kTile * kTile], c1[kTile * kTile];
  __m512 acc[kTile];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  constexpr size_t kQs = offsetof(BlockQ8_0, qs);
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(2, x + i * sizeof(BlockQ8_0) + kQs, xs);
    _tile_loadd(4, codes + i * kBTileBytes, 64);
    _tile_loadd(3, x + (i + 1) * sizeof(BlockQ8_0) + kQs, xs);
    _tile_loadd(5, codes + (i + 1) * kBTileBytes, 64);
    _tile_dpbssd(0, 2, 4);
    _tile_dpbssd(1, 3, 5);
    _tile_stored(0, c0, 64);
    _tile_stored(1, c1, 64);
    scale_add(c0, dx + i * kTile, _mm512_loadu_ps(dw + i * kTile), acc);
    scale_add(c1, dx + (i + 1) * kTile, _mm512_loadu_ps(dw + (i + 1) * kTile), acc);
  }
  if (i < nb) {
    _tile_zero(0);
    _tile_loadd(2, x + i * sizeof(BlockQ8_0) + kQs, xs);
    _tile_loadd(4, codes + i * kBTileBytes, 64);
    _tile_dpbssd(0, 2, 4);
    _tile_stored(0, c0, 64);
    scale_add(c0, dx + i * kTile, _mm512_loadu_ps(dw + i * kTile), acc);
  }
  const __mmask16 cols = static_cast<__mmask16>((1u << n_rows) - 1);
  for (int t = 0; t < n_tok; ++t) _mm512_mask_storeu_ps(y + t * ys, cols, acc[t]);
}

}  // namespace

void gemm_q4_0_repacked(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                        size_t xs, int64_t n_tokens, float* y, int64_t ys) {
  if (n_tokens < kMinTokens) {
    avx512::gemm_q4_0_repacked(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
    return;
  }
  const int64_t nb = n / 32;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  const int64_t n_panels = (n_rows + kTile - 1) / kTile;
  const size_t n_tiles = static_cast<size_t>(n_panels * nb);
  const size_t x_row = static_cast<size_t>(nb) * sizeof(BlockQ8_0);
  // One buffer: the panels' codes, their d_w, a token tile's d_x, the padded last tokens.
  auto* buf = static_cast<uint8_t*>(scratch_buffer(
      n_tiles * (kBTileBytes + kTile * sizeof(float)) + static_cast<size_t>(nb) * kTile * sizeof(float) +
      x_row * kTile));
  const Panels panels{reinterpret_cast<int8_t*>(buf),
                      reinterpret_cast<float*>(buf + n_tiles * kBTileBytes)};
  float* dx = panels.dw + n_tiles * kTile;
  uint8_t* tail = reinterpret_cast<uint8_t*>(dx + nb * kTile);
  decode_q4_0(wb, ws, n_rows, nb, panels);
  configure_int8_tiles();
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTile) {
    const int n_tok = static_cast<int>(min64(kTile, n_tokens - t0));
    const uint8_t* xt = xb + t0 * xs;
    size_t stride = xs;
    if (n_tok < kTile) {  // the last tokens, padded with zero rows so the tile loads stay inside
      std::memset(tail, 0, x_row * kTile);
      for (int t = 0; t < n_tok; ++t) std::memcpy(tail + t * x_row, xt + t * xs, x_row);
      xt = tail;
      stride = x_row;
    }
    for (int64_t i = 0; i < nb; ++i) {
      for (int t = 0; t < kTile; ++t) {
        dx[i * kTile + t] = half(reinterpret_cast<const BlockQ8_0*>(xt + t * stride)[i].d);
      }
    }
    for (int64_t pi = 0; pi < n_panels; ++pi) {
      const int rows = static_cast<int>(min64(kTile, n_rows - pi * kTile));
      const size_t at = static_cast<size_t>(pi * nb);
      tile_q8(nb, xt, stride, dx, panels.codes + at * kBTileBytes, panels.dw + at * kTile, n_tok,
              rows, y + t0 * ys + pi * kTile, ys);
    }
  }
  release_tiles();
}

}  // namespace squeeze::formats::amx
