// AMX (Intel Advanced Matrix Extensions) versions of Q4_0's and Q8_0's batched products.
//
// One int8 tile product (tdpbssd) computes a 16 tokens x 16 weight rows block of exact int32
// dot products over 32 codes: one ggml block. Each block's sums are then scaled and added in
// float with AVX-512, in block order, per output:
//   acc = fma(float(sum_b), d_w,b * d_x,b, acc)
// which is the order of llama.cpp's repacked Q4_0 kernels (vec_dot_q4_0_repacked): the AMX
// Q4_0 product gives the same bits as the AVX-512 and AVX2 ones, and as llama.cpp's. Q8_0 sums
// in the same block order on this tier (vec_dot_q8_0_blocks, and the AVX-512 gemm_q8_0_blocks
// for fewer tokens), not in llama.cpp's 8 lanes per block, which no tile product can give.
//
// Activations come in groups of 16 tokens (BatchGemm, format.h), per block: the A tile (16
// tokens x 32 codes) and d_x [16] floats; made once per matrix product (or here from Q8_0 rows,
// for gemm_q4_0_repacked). Weights are decoded per call, per 16-row panel and block: the B tile
// (8 x 64 bytes: 16 rows' 32 codes in groups of 4; Q4_0's as q - 8) and d_w [16] floats, reused by
// every token group. Four C tiles are in flight, so a block's sums are stored two blocks after
// its product was issued (the tile product's latency passes under the float work between).
// Called only after cpu_has_amx() (core/cpu.h), which asked the kernel for the tile state.
//
// Only intrinsics and this file's own internal functions: no inline function or template from
// another header (std::min, std::vector, ...), whose AMX-compiled copy the linker could hand to
// code that runs on CPUs without AVX-512. Buffers come from scratch_buffer (format.cpp).
#include <cstddef>
#include <cstring>

#include "formats/amx_util.h"
#include "formats/blocks.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::amx {
namespace {

using panels::decode_q4_0_panel;
using panels::decode_q8_0_panel;
using panels::kUnit;
using panels::PanelDecoder;
using panels::panels_bytes;
constexpr size_t kATile = 16 * 32;  // one block of a group: 16 tokens' codes, then d_x [16]
static_assert(kATile + 64 == kUnit);  // a block of a group is as big as one of a panel

// Tiles: C 0-3 (16 tokens x 16 int32), A 4, 5 (16 tokens x 32 codes), B 6, 7 (8 x 64 bytes).
void configure_int8_tiles() {
  const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 8, 8};
  const uint16_t colsb[8] = {64, 64, 64, 64, 32, 32, 64, 64};
  configure_tiles(8, rows, colsb);
}

// Block b's tile product into C tile b % 4 (A tile 4 + b % 2, B tile 6 + b % 2). (GCC's tile
// intrinsics take literal tile numbers.)
inline void issue_block(int64_t b, const uint8_t* a, const uint8_t* w) {
  switch (b & 3) {
    case 0:
      _tile_zero(0);
      _tile_loadd(4, a, 32);
      _tile_loadd(6, w, 64);
      _tile_dpbssd(0, 4, 6);
      break;
    case 1:
      _tile_zero(1);
      _tile_loadd(5, a, 32);
      _tile_loadd(7, w, 64);
      _tile_dpbssd(1, 5, 7);
      break;
    case 2:
      _tile_zero(2);
      _tile_loadd(4, a, 32);
      _tile_loadd(6, w, 64);
      _tile_dpbssd(2, 4, 6);
      break;
    default:
      _tile_zero(3);
      _tile_loadd(5, a, 32);
      _tile_loadd(7, w, 64);
      _tile_dpbssd(3, 5, 7);
      break;
  }
}

inline void store_block(int64_t b, int32_t* c) {
  switch (b & 3) {
    case 0: _tile_stored(0, c, 64); break;
    case 1: _tile_stored(1, c, 64); break;
    case 2: _tile_stored(2, c, 64); break;
    default: _tile_stored(3, c, 64); break;
  }
}

// acc[t] += float(C[t]) * (d_w * d_x[t]) for the 16 tokens t of one block's C tile.
inline void scale_add(const int32_t* c, const float* dx, __m512 dw, __m512 (&acc)[kTile]) {
  for (int t = 0; t < kTile; ++t) {
    const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(dx[t]));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + t * kTile)), s, acc[t]);
  }
}

// One group of 16 tokens against one panel: y rows of its first n_tok tokens, n_rows columns.
void group_panel(int64_t nb, const uint8_t* g, const uint8_t* panel, int n_tok, int n_rows,
                 float* y, int64_t ys) {
  constexpr int64_t kAhead = 2;
  alignas(64) int32_t c[kTile * kTile];
  __m512 acc[kTile];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t b = 0; b < kAhead && b < nb; ++b) issue_block(b, g + b * kUnit, panel + b * kUnit);
  for (int64_t b = 0; b < nb; ++b) {
    store_block(b, c);
    if (b + kAhead < nb) issue_block(b + kAhead, g + (b + kAhead) * kUnit, panel + (b + kAhead) * kUnit);
    scale_add(c, reinterpret_cast<const float*>(g + b * kUnit + kATile),
              _mm512_load_ps(reinterpret_cast<const float*>(panel + b * kUnit + panels::kBytesB)), acc);
  }
  const __mmask16 cols = first_lanes(n_rows);
  for (int t = 0; t < n_tok; ++t) _mm512_mask_storeu_ps(y + t * ys, cols, acc[t]);
}


// The product on groups; bt: panels_bytes(nb, n_rows) bytes for the weights decoded by `decode`.
void gemm_groups(PanelDecoder decode, int64_t nb, const uint8_t* w, size_t ws, int64_t n_rows,
                 const uint8_t* groups, int64_t n_tokens, float* y, int64_t ys, uint8_t* bt) {
  const int64_t n_panels = (n_rows + kTile - 1) / kTile;
  const size_t per = static_cast<size_t>(nb) * kUnit;  // a group, or a panel
  for (int64_t p = 0; p < n_panels; ++p) {
    decode(w + p * kTile * ws, ws, static_cast<int>(min64(kTile, n_rows - p * kTile)),
                      nb, bt + p * per);
  }
  configure_int8_tiles();
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kTile) {
    const int n_tok = static_cast<int>(min64(kTile, n_tokens - t0));
    const uint8_t* g = groups + (t0 / kTile) * per;
    for (int64_t p = 0; p < n_panels; ++p) {
      group_panel(nb, g, bt + p * per, n_tok, static_cast<int>(min64(kTile, n_rows - p * kTile)),
                  y + t0 * ys + p * kTile, ys);
    }
  }
  release_tiles();
}

// Block i of token t (a Q8_0 block at q) into group g.
inline void put_block(const BlockQ8_0* q, int t, int64_t i, uint8_t* g) {
  uint8_t* u = g + i * kUnit;
  std::memcpy(u + t * 32, q->qs, 32);
  reinterpret_cast<float*>(u + kATile)[t] = half(q->d);
}

// Q8_0 rows (token t at x + t * xs) regrouped, then the batch product with `decode`.
void gemm_rows(PanelDecoder decode, int64_t n, const void* w, size_t ws, int64_t n_rows,
               const void* x, size_t xs, int64_t n_tokens, float* y, int64_t ys) {
  const int64_t nb = n / 32;
  const int64_t n_groups = (n_tokens + kTile - 1) / kTile;
  const size_t per = static_cast<size_t>(nb) * kUnit;
  auto* buf = static_cast<uint8_t*>(scratch_buffer(n_groups * per + panels_bytes(nb, n_rows)));
  std::memset(buf, 0, n_groups * per);
  const auto* xb = static_cast<const uint8_t*>(x);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto* row = reinterpret_cast<const BlockQ8_0*>(xb + t * xs);
    uint8_t* g = buf + (t / kTile) * per;
    for (int64_t i = 0; i < nb; ++i) put_block(row + i, static_cast<int>(t % kTile), i, g);
  }
  gemm_groups(decode, nb, static_cast<const uint8_t*>(w), ws, n_rows, buf, n_tokens, y, ys,
              buf + n_groups * per);
}

void gemm_batch(PanelDecoder decode, int64_t n, const void* w, size_t ws, int64_t n_rows,
                const void* groups, int64_t n_tokens, float* y, int64_t ys) {
  const int64_t nb = n / 32;
  gemm_groups(decode, nb, static_cast<const uint8_t*>(w), ws, n_rows,
              static_cast<const uint8_t*>(groups), n_tokens, y, ys,
              static_cast<uint8_t*>(scratch_buffer(panels_bytes(nb, n_rows))));
}

}  // namespace

size_t q8_0_group_bytes(int64_t n) { return n % 32 == 0 ? static_cast<size_t>(n / 32) * kUnit : 0; }

void prepare_q8_0_groups(const float* x, int64_t x_stride, int64_t n, int64_t n_tokens, void* group) {
  auto* g = static_cast<uint8_t*>(group);
  const int64_t nb = n / 32;
  std::memset(g, 0, static_cast<size_t>(nb) * kUnit);
  BlockQ8_0 q;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < nb; ++i) {
      avx2::quantize_q8_0(x + t * x_stride + i * 32, &q, 32);  // Q8_0's run-time quantizer
      put_block(&q, static_cast<int>(t), i, g);
    }
  }
}

void gemm_q4_0_batch(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* groups,
                     size_t, int64_t n_tokens, float* y, int64_t ys) {
  gemm_batch(decode_q4_0_panel, n, w, ws, n_rows, groups, n_tokens, y, ys);
}

void gemm_q8_0_batch(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* groups,
                     size_t, int64_t n_tokens, float* y, int64_t ys) {
  gemm_batch(decode_q8_0_panel, n, w, ws, n_rows, groups, n_tokens, y, ys);
}

void gemm_q4_0_repacked(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                        size_t xs, int64_t n_tokens, float* y, int64_t ys) {
  if (n_tokens < kMinTokens) {
    avx512::gemm_q4_0_repacked(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
    return;
  }
  gemm_rows(decode_q4_0_panel, n, w, ws, n_rows, x, xs, n_tokens, y, ys);
}

void gemm_q8_0_blocks(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                      size_t xs, int64_t n_tokens, float* y, int64_t ys) {
  if (n_tokens < kMinTokens) {
    avx512::gemm_q8_0_blocks(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
    return;
  }
  gemm_rows(decode_q8_0_panel, n, w, ws, n_rows, x, xs, n_tokens, y, ys);
}

}  // namespace squeeze::formats::amx
