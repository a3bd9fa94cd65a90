// AVX-512 products of batches (16 tokens or more) on weights decoded per call into 16-row
// panels: Q4_0 and Q8_0 in block order with VNNI (Q4_0's repacked order, Q8_0's on this tier;
// int8_panels.h, the AMX B-tile layout), bit-identical to the scalar twins
// vec_dot_q4_0_repacked / vec_dot_q8_0_blocks; F16 on float panels, within float rounding of
// vec_dot_f16. Called only after cpu_has_avx512() (core/cpu.h).
#include <cstring>

#include "formats/avx512_util.h"
#include "formats/blocks.h"
#include "formats/int8_panels.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx512 {
namespace {

// Q4_0 and Q8_0 in block order: a panel register holds the 4 codes of group k of all 16 rows
// (int8_panels.h), so vpdpbusd against one token's broadcast group k accumulates the 16 rows'
// block sums in the 16 lanes with no reduction; codes used unsigned as c ^ 0x80 = c + 128
// (corr = 128 * sum(y)). Then acc = fma(float(sum - corr), d_w * d_x, acc) per token.
constexpr int kPanelTile = 8;  // tokens per pass over a panel

// What a token needs of its block i: corr = 128 * sum(y), dx.
struct TokenBlock {
  int32_t corr;
  float dx;
};

// T tokens (rows x + t * xs, Q8_0; tb[t * nb + i]) against one panel: y rows t, columns
// [0, n_rows) (n_rows <= 16).
template <int T>
inline void panel_tokens(int64_t nb, const uint8_t* panel, const uint8_t* x, size_t xs,
                         const TokenBlock* tb, int n_rows, float* y, int64_t ys) {
  const BlockQ8_0* xr[T];
  for (int t = 0; t < T; ++t) xr[t] = reinterpret_cast<const BlockQ8_0*>(x + t * xs);
  __m512 acc[T];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* u = panel + i * panels::kUnit;
    __m512i b[8];
    for (int k = 0; k < 8; ++k) {
      b[k] = _mm512_xor_si512(_mm512_load_si512(u + k * 64), flip);
    }
    const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(u + panels::kBytesB));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const int8_t* q = xr[t][i].qs;
      // Two chains of vpdpbusd (groups 0-3, 4-7): half the latency; the int sum is exact.
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        int32_t g0, g1;
        std::memcpy(&g0, q + 4 * k, 4);
        std::memcpy(&g1, q + 16 + 4 * k, 4);
        s0 = _mm512_dpbusd_epi32(s0, b[k], _mm512_set1_epi32(g0));
        s1 = _mm512_dpbusd_epi32(s1, b[4 + k], _mm512_set1_epi32(g1));
      }
      const TokenBlock& c = tb[t * nb + i];
      const __m512i sum = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(c.corr));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_set1_ps(c.dx)), acc[t]);
    }
  }
  const __mmask16 cols = first_lanes16(n_rows);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ys, cols, acc[t]);
}

// The product through panels made by `decode`.
void gemm_panels(panels::PanelDecoder decode, int64_t nb, const uint8_t* w, size_t ws,
                 int64_t n_rows, const uint8_t* x, size_t xs, int64_t n_tokens, float* y,
                 int64_t ys) {
  const int64_t n_panels = (n_rows + panels::kPanelRows - 1) / panels::kPanelRows;
  const size_t per = static_cast<size_t>(nb) * panels::kUnit;
  const size_t tb_bytes = static_cast<size_t>(kPanelTile * nb) * sizeof(TokenBlock);
  auto* buf = static_cast<uint8_t*>(scratch_buffer(panels::panels_bytes(nb, n_rows) + tb_bytes));
  auto* tb = reinterpret_cast<TokenBlock*>(buf + panels::panels_bytes(nb, n_rows));
  for (int64_t p = 0; p < n_panels; ++p) {
    const int64_t r0 = p * panels::kPanelRows;
    decode(w + r0 * ws, ws, static_cast<int>(n_rows - r0 < 16 ? n_rows - r0 : 16), nb, buf + p * per);
  }
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kPanelTile) {
    const int n_tok = static_cast<int>(n_tokens - t0 < kPanelTile ? n_tokens - t0 : kPanelTile);
    for (int t = 0; t < n_tok; ++t) {
      const BlockQ8_0* xq = reinterpret_cast<const BlockQ8_0*>(x + (t0 + t) * xs);
      for (int64_t i = 0; i < nb; ++i) tb[t * nb + i] = {128 * sum_i8(xq[i].qs), half_to_float(xq[i].d)};
    }
    for (int64_t p = 0; p < n_panels; ++p) {
      const int64_t r0 = p * panels::kPanelRows;
      const int rows = static_cast<int>(n_rows - r0 < 16 ? n_rows - r0 : 16);
      const uint8_t* panel = buf + p * per;
      if (n_tok == kPanelTile) {
        panel_tokens<kPanelTile>(nb, panel, x + t0 * xs, xs, tb, rows, y + t0 * ys + r0, ys);
      } else {
        for (int t = 0; t < n_tok; ++t) {
          panel_tokens<1>(nb, panel, x + (t0 + t) * xs, xs, tb + t * nb, rows, y + (t0 + t) * ys + r0, ys);
        }
      }
    }
  }
}

// F16: element k of 16 weight rows converted to float in one register (64 bytes per k), decoded
// per call; rows past n_rows zero.
void decode_f16_panel(const uint8_t* w, size_t ws, int rows, int64_t n, float* dst) {
  for (int64_t k0 = 0; k0 < n; k0 += 16) {
    __m512i a[16];
    for (int r = 0; r < 16; ++r) {
      a[r] = r < rows ? _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256(
                            reinterpret_cast<const __m256i*>(w + r * ws + k0 * 2))))
                      : _mm512_setzero_si512();
    }
    panels::transpose16x16(a);
    for (int k = 0; k < 16; ++k) _mm512_store_si512(dst + (k0 + k) * 16, a[k]);
  }
}

// T tokens (xf: T rows of n floats) against one float panel: acc = fma(w_k, x_k, acc) over k.
template <int T>
inline void f16_panel_tokens(int64_t n, const float* panel, const float* xf, int n_rows, float* y,
                             int64_t ys) {
  __m512 acc[T];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t k = 0; k < n; ++k) {
    const __m512 wk = _mm512_load_ps(panel + k * 16);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(wk, _mm512_set1_ps(xf[t * n + k]), acc[t]);
  }
  const __mmask16 cols = first_lanes16(n_rows);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ys, cols, acc[t]);
}

// The same on two panels at once (p0 of 16 rows, p1 of n_rows1): each token's x_k is loaded
// once for both, halving the broadcasts per fused multiply-add.
template <int T>
inline void f16_panels2_tokens(int64_t n, const float* p0, const float* p1, const float* xf,
                               int n_rows1, float* y, int64_t ys) {
  __m512 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
  for (int64_t k = 0; k < n; ++k) {
    const __m512 w0 = _mm512_load_ps(p0 + k * 16);
    const __m512 w1 = _mm512_load_ps(p1 + k * 16);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512 xk = _mm512_set1_ps(xf[t * n + k]);
      acc0[t] = _mm512_fmadd_ps(w0, xk, acc0[t]);
      acc1[t] = _mm512_fmadd_ps(w1, xk, acc1[t]);
    }
  }
  const __mmask16 cols1 = first_lanes16(n_rows1);
  for (int t = 0; t < T; ++t) {
    _mm512_storeu_ps(y + t * ys, acc0[t]);
    _mm512_mask_storeu_ps(y + t * ys + 16, cols1, acc1[t]);
  }
}

}  // namespace

void gemm_f16_panels(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                     size_t xs, int64_t n_tokens, float* y, int64_t ys) {
  const int64_t n_panels = (n_rows + 15) / 16;
  const size_t per = static_cast<size_t>(n) * 16;  // floats a panel
  auto* buf = static_cast<float*>(scratch_buffer((n_panels * per + kPanelTile * n) * sizeof(float)));
  float* xf = buf + n_panels * per;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  for (int64_t p = 0; p < n_panels; ++p) {
    decode_f16_panel(wb + p * 16 * ws, ws, static_cast<int>(n_rows - p * 16 < 16 ? n_rows - p * 16 : 16),
                     n, buf + p * per);
  }
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kPanelTile) {
    const int n_tok = static_cast<int>(n_tokens - t0 < kPanelTile ? n_tokens - t0 : kPanelTile);
    for (int t = 0; t < n_tok; ++t) {
      const auto* h = reinterpret_cast<const uint16_t*>(xb + (t0 + t) * xs);
      for (int64_t k = 0; k < n; k += 16) {
        _mm512_storeu_ps(xf + t * n + k, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + k))));
      }
    }
    int64_t p = 0;
    if (n_tok == kPanelTile) {
      for (; p + 2 <= n_panels; p += 2) {
        const int rows1 = static_cast<int>(n_rows - p * 16 - 16 < 16 ? n_rows - p * 16 - 16 : 16);
        f16_panels2_tokens<kPanelTile>(n, buf + p * per, buf + (p + 1) * per, xf, rows1,
                                       y + t0 * ys + p * 16, ys);
      }
    }
    for (; p < n_panels; ++p) {
      const int rows = static_cast<int>(n_rows - p * 16 < 16 ? n_rows - p * 16 : 16);
      if (n_tok == kPanelTile) {
        f16_panel_tokens<kPanelTile>(n, buf + p * per, xf, rows, y + t0 * ys + p * 16, ys);
      } else {
        for (int t = 0; t < n_tok; ++t) {
          f16_panel_tokens<1>(n, buf + p * per, xf + t * n, rows, y + (t0 + t) * ys + p * 16, ys);
        }
      }
    }
  }
}

void gemm_q4_0_panels(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                      size_t xs, int64_t n_tokens, float* y, int64_t ys) {
  gemm_panels(panels::decode_q4_0_panel, n / kBlock32, static_cast<const uint8_t*>(w), ws, n_rows,
              static_cast<const uint8_t*>(x), xs, n_tokens, y, ys);
}

void gemm_q8_0_panels(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                      size_t xs, int64_t n_tokens, float* y, int64_t ys) {
  gemm_panels(panels::decode_q8_0_panel, n / kBlock32, static_cast<const uint8_t*>(w), ws, n_rows,
              static_cast<const uint8_t*>(x), xs, n_tokens, y, ys);
}

}  // namespace squeeze::formats::avx512
