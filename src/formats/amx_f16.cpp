// AMX BF16 version of F16's tiled product (weights and activations in half precision), for
// batches of tokens.
//
// AMX has no half-precision tile product on these CPUs, only BF16 (tdpbf16ps: pairs of bf16
// products added into float32). A half has 11 significant bits, a bf16 8, so each half h is
// split exactly into two bf16: hi = h rounded to nearest even, lo = h - hi (at most 4
// significant bits, so exact too). Then
//   w . x = wh . xh + wh . xl + wl . xh + wl . xl
// with every product exact in float32: four tile products per 32 elements, summed in float32
// by the tiles. The result is within float rounding of vec_dot_f16 (another summation order, as
// the AVX-512 kernel's), not bit-identical to it.
//
// Tiles, all 16 rows x 64 bytes: 0-3 C (2 token tiles x 2 row panels of 16 x 16 floats),
// 4-5 A (16 tokens x 32 bf16), 6-7 B (16 pairs x 16 rows' bf16 pairs). Activations come split
// in groups of 16 tokens (BatchGemm, format.h: [16][n] hi then [16][n] lo), made once per matrix
// product; weights are split once per call into B tiles (16-row panels, reused by every token
// tile).
// Called only after cpu_has_amx() (core/cpu.h). Only intrinsics and internal functions here
// (see amx_gemm.cpp).
#include <cstring>

#include "formats/amx_util.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::amx {
namespace {

constexpr int64_t kStep = 32;          // elements per tile product
constexpr size_t kTileBytes = 16 * 64;
constexpr size_t kStepBytes = 2 * kTileBytes;  // one panel's hi and lo B tiles of a step

// 16 floats that are halves, split into bf16 hi (round to nearest even) and lo = x - hi.
inline void split16(__m512 x, __m256i* hi, __m256i* lo) {
  const __m512i b = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd));
  const __m512i h = _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
  const __m512 l = _mm512_sub_ps(x, _mm512_castsi512_ps(h));
  *hi = _mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16));
  *lo = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(l), 16));
}

// 32 halves at src -> 32 bf16 hi at hi, 32 lo at lo.
inline void split32(const uint8_t* src, uint16_t* hi, uint16_t* lo) {
  __m256i h0, l0, h1, l1;
  split16(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))), &h0, &l0);
  split16(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32))), &h1, &l1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), h0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + 16), h1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), l0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + 16), l1);
}

// Rows [0, n_r) (n_r <= 16) of a panel into its B tiles at dst (per step: hi then lo). Each
// row is read front to back (the weights stream from memory once), its pairs stored as the
// tile's rows, then each tile is transposed in place.
void decode_panel(const uint8_t* w, size_t ws, int n_r, int64_t n_steps, uint8_t* dst) {
  for (int r = 0; r < 16; ++r) {
    for (int64_t s = 0; s < n_steps; ++s) {
      uint8_t* hi = dst + s * kStepBytes + r * 64;
      if (r < n_r) {
        split32(w + r * ws + s * kStep * 2, reinterpret_cast<uint16_t*>(hi),
                reinterpret_cast<uint16_t*>(hi + kTileBytes));
      } else {
        std::memset(hi, 0, 64);
        std::memset(hi + kTileBytes, 0, 64);
      }
    }
  }
  for (int64_t t = 0; t < 2 * n_steps; ++t) {
    uint8_t* tile = dst + t * kTileBytes;
    transpose_dwords16(reinterpret_cast<const int32_t*>(tile), 16, tile);
  }
}

// C[t][p] += A_t . B_p for the NT token tiles and NP panels (tiles: C 0 + 2t + p, A 4 + t,
// B 6 + p).
template <int NT, int NP>
inline void dp_all() {
  _tile_dpbf16ps(0, 4, 6);
  if constexpr (NP == 2) _tile_dpbf16ps(1, 4, 7);
  if constexpr (NT == 2) _tile_dpbf16ps(2, 5, 6);
  if constexpr (NT == 2 && NP == 2) _tile_dpbf16ps(3, 5, 7);
}

// A tiles of token tile 0 (and 1: the next group).
template <int NT>
inline void load_a(const uint8_t* a, size_t stride, size_t group_bytes) {
  _tile_loadd(4, a, stride);
  if constexpr (NT == 2) _tile_loadd(5, a + group_bytes, stride);
}

// B tiles of panel 0 (and 1).
template <int NP>
inline void load_b(const uint8_t* b, size_t panel_bytes) {
  _tile_loadd(6, b, 64);
  if constexpr (NP == 2) _tile_loadd(7, b + panel_bytes, 64);
}

// NT token tiles (groups g, g + 1 of 16 tokens) against NP panels (B tiles from b,
// panel_bytes apart): y rows from the group's first token, columns from the panel's first row;
// n_tok / n_rows of them valid.
template <int NT, int NP>
void tiles(int64_t n, const uint8_t* g, const uint8_t* b, size_t panel_bytes, int n_tok,
           int n_rows, float* y, int64_t ys) {
  const size_t stride = static_cast<size_t>(n) * 2;
  const size_t group_bytes = 32 * stride;
  const uint8_t* lo = g + 16 * stride;
  _tile_zero(0);
  if constexpr (NP == 2) _tile_zero(1);
  if constexpr (NT == 2) _tile_zero(2);
  if constexpr (NT == 2 && NP == 2) _tile_zero(3);
  for (int64_t s = 0; s < n / kStep; ++s) {
    const uint8_t* bs = b + s * kStepBytes;
    const size_t at = static_cast<size_t>(s) * kStep * 2;
    load_a<NT>(g + at, stride, group_bytes);  // hi
    load_b<NP>(bs, panel_bytes);              // hi
    dp_all<NT, NP>();
    load_b<NP>(bs + kTileBytes, panel_bytes);  // lo
    dp_all<NT, NP>();
    load_a<NT>(lo + at, stride, group_bytes);  // lo
    dp_all<NT, NP>();
    load_b<NP>(bs, panel_bytes);  // hi
    dp_all<NT, NP>();
  }
  alignas(64) float c[4][16 * 16];
  _tile_stored(0, c[0], 64);
  if constexpr (NP == 2) _tile_stored(1, c[1], 64);
  if constexpr (NT == 2) _tile_stored(2, c[2], 64);
  if constexpr (NT == 2 && NP == 2) _tile_stored(3, c[3], 64);
  for (int t = 0; t < n_tok; ++t) {
    for (int p = 0; p < NP; ++p) {
      const int cols = n_rows - 16 * p;
      if (cols <= 0) break;
      const float* src = c[2 * (t / 16) + p] + (t % 16) * 16;
      _mm512_mask_storeu_ps(y + t * ys + 16 * p, first_lanes(cols), _mm512_load_ps(src));
    }
  }
}

size_t panels_bytes(int64_t n, int64_t n_rows) {
  return static_cast<size_t>((n_rows + kTile - 1) / kTile) * static_cast<size_t>(n / kStep) * kStepBytes;
}

// The product on prepared groups; bt: panels_bytes(n, n_rows) bytes for the B tiles.
void gemm_groups(int64_t n, const uint8_t* w, size_t ws, int64_t n_rows, const uint8_t* groups,
                 int64_t n_tokens, float* y, int64_t ys, uint8_t* bt) {
  const int64_t n_steps = n / kStep;
  const int64_t n_panels = (n_rows + kTile - 1) / kTile;
  const int64_t n_groups = (n_tokens + kTile - 1) / kTile;
  const size_t panel_bytes = static_cast<size_t>(n_steps) * kStepBytes;
  const size_t group_bytes = static_cast<size_t>(n) * 64;
  for (int64_t p = 0; p < n_panels; ++p) {
    const int n_r = static_cast<int>(min64(kTile, n_rows - p * kTile));
    decode_panel(w + p * kTile * ws, ws, n_r, n_steps, bt + p * panel_bytes);
  }
  const uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
  const uint16_t colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
  configure_tiles(8, rows, colsb);
  for (int64_t g = 0; g < n_groups; g += 2) {
    const bool two_t = g + 1 < n_groups;
    const int n_tok = static_cast<int>(min64(2 * kTile, n_tokens - g * kTile));
    const uint8_t* gp = groups + g * group_bytes;
    for (int64_t p = 0; p < n_panels; p += 2) {
      const bool two_p = p + 1 < n_panels;
      const int n_r = static_cast<int>(min64(2 * kTile, n_rows - p * kTile));
      const uint8_t* b = bt + p * panel_bytes;
      float* yt = y + g * kTile * ys + p * kTile;
      if (two_t && two_p) {
        tiles<2, 2>(n, gp, b, panel_bytes, n_tok, n_r, yt, ys);
      } else if (two_t) {
        tiles<2, 1>(n, gp, b, panel_bytes, n_tok, n_r, yt, ys);
      } else if (two_p) {
        tiles<1, 2>(n, gp, b, panel_bytes, n_tok, n_r, yt, ys);
      } else {
        tiles<1, 1>(n, gp, b, panel_bytes, n_tok, n_r, yt, ys);
      }
    }
  }
  release_tiles();
}

}  // namespace

size_t f16_group_bytes(int64_t n) { return n % kStep == 0 ? static_cast<size_t>(n) * 64 : 0; }

void prepare_f16(const float* x, int64_t x_stride, int64_t n, int64_t n_tokens, void* group) {
  auto* hi = static_cast<uint16_t*>(group);
  uint16_t* lo = hi + 16 * n;
  for (int64_t t = 0; t < kTile; ++t) {
    if (t >= n_tokens) {
      std::memset(hi + t * n, 0, static_cast<size_t>(n) * 2);
      std::memset(lo + t * n, 0, static_cast<size_t>(n) * 2);
      continue;
    }
    // Rounded to half as F16's quantize_row does (nearest even), then split.
    for (int64_t i = 0; i < n; i += 16) {
      const __m512 v = _mm512_cvtph_ps(
          _mm512_cvtps_ph(_mm512_loadu_ps(x + t * x_stride + i), _MM_FROUND_TO_NEAREST_INT));
      __m256i h, l;
      split16(v, &h, &l);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + t * n + i), h);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + t * n + i), l);
    }
  }
}

void gemm_f16_batch(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* groups,
                    size_t, int64_t n_tokens, float* y, int64_t ys) {
  gemm_groups(n, static_cast<const uint8_t*>(w), ws, n_rows, static_cast<const uint8_t*>(groups),
              n_tokens, y, ys, static_cast<uint8_t*>(scratch_buffer(panels_bytes(n, n_rows))));
}

void gemm_f16(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
              int64_t n_tokens, float* y, int64_t ys) {
  if (n_tokens < kMinTokens || n % kStep != 0) {
    avx512::gemm_f16(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
    return;
  }
  // The F16 rows split into groups here, then the batch product.
  const auto* xb = static_cast<const uint8_t*>(x);
  const int64_t n_groups = (n_tokens + kTile - 1) / kTile;
  const size_t group_bytes = f16_group_bytes(n);
  auto* buf = static_cast<uint8_t*>(scratch_buffer(n_groups * group_bytes + panels_bytes(n, n_rows)));
  for (int64_t g = 0; g < n_groups; ++g) {
    auto* hi = reinterpret_cast<uint16_t*>(buf + g * group_bytes);
    uint16_t* lo = hi + 16 * n;
    for (int64_t t = 0; t < kTile; ++t) {
      const int64_t tok = g * kTile + t;
      if (tok >= n_tokens) {
        std::memset(hi + t * n, 0, static_cast<size_t>(n) * 2);
        std::memset(lo + t * n, 0, static_cast<size_t>(n) * 2);
        continue;
      }
      for (int64_t s = 0; s < n / kStep; ++s) {
        split32(xb + tok * xs + s * kStep * 2, hi + t * n + s * kStep, lo + t * n + s * kStep);
      }
    }
  }
  gemm_groups(n, static_cast<const uint8_t*>(w), ws, n_rows, buf, n_tokens, y, ys,
              buf + n_groups * group_bytes);
}

}  // namespace squeeze::formats::amx
