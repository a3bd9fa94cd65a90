// AVX-512 (F, BW, VL) + VNNI versions of the tiled products of avx2_gemm.cpp, bit-identical to
// them (and so to loops of vec_dot):
//  - vpdpbusd computes the same 8 int32 lanes per block as maddubs + madd (no int16
//    saturation occurs in either: |codes| <= 128, |activations| <= 127);
//  - a 512-bit register holds two outputs' 8-lane accumulators side by side (two weight rows
//    against one token), so each instruction advances two outputs in exactly the order of the
//    256-bit code, and 32 registers hold a 4 x 4 tile without spilling.
// The sq formats' tiles are in avx512_sq.cpp.
// Called only after cpu_has_avx512() (core/cpu.h).
#include <type_traits>
#include <vector>

#include "formats/avx512_util.h"
#include "formats/blocks.h"
#include "formats/format.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx512 {
namespace {

// ---- Q4_1 x Q8_1 and Q8_0 x Q8_0 in vec_dot's lane order ----

// Weight side of two rows' block i: unsigned codes (Q8_0: |w|, with the sign mask to move
// onto the activations), and d_w of both rows.
struct Q4_1Rows {
  using W = BlockQ4_1;
  using X = BlockQ8_1;
  static constexpr bool kHasMin = true;
  __m512i u;
  __m512 d;
  void load(const W& a, const W& b) {
    load_codes(a, b);
    d = halves2(a.d, b.d);
  }
  void load_codes(const W& a, const W& b) { u = unpack2(a.qs, b.qs); }
  __m512i act(__m512i y) const { return y; }
};

// Signed codes (Q8_0's int8, Q5_0's q - 16) as |w| and the sign mask.
template <typename C>  // C::W, C::codes(const W&): the block's 32 signed codes
struct SignedRows {
  using W = typename C::W;
  using X = BlockQ8_0;
  static constexpr bool kHasMin = false;
  __m512i u;
  __mmask64 neg;
  __m512 d;
  void load(const W& a, const W& b) {
    load_codes(a, b);
    d = halves2(a.d, b.d);
  }
  void load_codes(const W& a, const W& b) {
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(C::codes(a)), C::codes(b), 1);
    u = _mm512_abs_epi8(w);
    neg = _mm512_movepi8_mask(w);
  }
  // sign(y, w) where w != 0; where w == 0 the code |w| is 0 and y does not matter.
  __m512i act(__m512i y) const { return _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y); }
};

struct Q8_0Signed {
  using W = BlockQ8_0;
  static __m256i codes(const W& b) { return load32(b.qs); }
};
struct Q5_0Signed {
  using W = BlockQ5_0;
  static __m256i codes(const W& b) { return avx2::q5_0_codes(b.qs, b.qh); }
};
using Q8_0Rows = SignedRows<Q8_0Signed>;
using Q5_0Rows = SignedRows<Q5_0Signed>;

// RM rows (even) x RN tokens of a batch (decode has gemv8). acc[p][t] holds rows 2p (low half)
// and 2p+1 (high half).
template <typename R, int RM, int RN>
inline void tile(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y,
                 int64_t ys) {
  static_assert(RM % 2 == 0);
  constexpr int P = RM / 2;
  using W = typename R::W;
  using X = typename R::X;
  const W* wr[RM];
  const X* xr[RN];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  for (int t = 0; t < RN; ++t) xr[t] = reinterpret_cast<const X*>(x + t * xs);
  __m512 acc[P][RN];
  float mins[RM][RN];
  __m128 mins4[RM];
  (void)mins;
  (void)mins4;
  for (int r = 0; r < RM; ++r) mins4[r] = _mm_setzero_ps();
  for (int p = 0; p < P; ++p) {
    for (int t = 0; t < RN; ++t) acc[p][t] = _mm512_setzero_ps();
  }
  for (int r = 0; r < RM; ++r) {
    for (int t = 0; t < RN; ++t) mins[r][t] = 0.0f;
  }
  for (int64_t i = 0; i < nb; ++i) {
    R rows[P];
    for (int p = 0; p < P; ++p) {
      rows[p].load(wr[2 * p][i], wr[2 * p + 1][i]);
    }
    for (int t = 0; t < RN; ++t) {
      const __m512i y2 = _mm512_broadcast_i64x4(load32(xr[t][i].qs));
      const __m512 dx = _mm512_set1_ps(half_to_float(xr[t][i].d));
      for (int p = 0; p < P; ++p) {
        const __m512 d = _mm512_mul_ps(rows[p].d, dx);
        acc[p][t] = _mm512_fmadd_ps(d, dot_lanes(rows[p].u, rows[p].act(y2)), acc[p][t]);
      }
    }
    if constexpr (R::kHasMin) {
      // mins[r][t] += m_r * s_t, lanes over the 4 tokens of a 4 x 4 tile; a multiply then an
      // add per lane, as the scalar code.
      if constexpr (RN == 4 && RM == 4) {
        const __m128 s4 = _mm_cvtph_ps(_mm_setr_epi16(
            static_cast<short>(xr[0][i].s), static_cast<short>(xr[1][i].s),
            static_cast<short>(xr[2][i].s), static_cast<short>(xr[3][i].s), 0, 0, 0, 0));
        for (int r = 0; r < RM; ++r) {
          const __m128 m = _mm_cvtph_ps(_mm_set1_epi16(static_cast<short>(wr[r][i].m)));
          mins4[r] = _mm_add_ps(mins4[r], _mm_mul_ps(m, s4));
        }
      } else {
        for (int t = 0; t < RN; ++t) {
          const float sx = half_to_float(xr[t][i].s);
          for (int r = 0; r < RM; ++r) mins[r][t] += half_to_float(wr[r][i].m) * sx;
        }
      }
    }
  }
  if constexpr (R::kHasMin && RN == 4 && RM == 4) {
    for (int r = 0; r < RM; ++r) _mm_storeu_ps(mins[r], mins4[r]);
  }
  for (int p = 0; p < P; ++p) {
    for (int t = 0; t < RN; ++t) {
      if constexpr (R::kHasMin) {
        y[t * ys + 2 * p] = hsum_lo(acc[p][t]) + mins[2 * p][t];
        y[t * ys + 2 * p + 1] = hsum_hi(acc[p][t]) + mins[2 * p + 1][t];
      } else {
        y[t * ys + 2 * p] = hsum_lo(acc[p][t]);
        y[t * ys + 2 * p + 1] = hsum_hi(acc[p][t]);
      }
    }
  }
}

constexpr int kRowsInOrder[8] = {0, 1, 2, 3, 4, 5, 6, 7};

// The activation blocks' scales as floats, converted once per call for every row: token t's
// d of block i at [2 t nb + i], Q8_1's s at [2 t nb + nb + i].
template <typename X>
void token_scales(int64_t nb, const uint8_t* x, size_t xs, int64_t n_tokens, float* out) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const X* xt = reinterpret_cast<const X*>(x + t * xs);
    float* d = out + 2 * t * nb;
    for (int64_t i = 0; i < nb; ++i) {
      d[i] = half_to_float(xt[i].d);
      if constexpr (std::is_same_v<X, BlockQ8_1>) d[nb + i] = half_to_float(xt[i].s);
    }
  }
}

// 8 rows x RN tokens (decode: RN = 1; a decode step of a few sequences: RN <= 4) in vec_dot's
// lane order, the rows' scales (and Q4_1's mins) gathered once for all RN tokens, the weights
// prefetched; xf: the tokens' scales (token_scales). Each output sums exactly as with RN = 1.
// The rows go by in two halves of four, so that the 4 x RN accumulators, the mins and a half's
// codes and scales stay in registers.
template <typename R, int RN>
inline void gemv8(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                  const float* xf, float* y, int64_t ys) {
  using W = typename R::W;
  using X = typename R::X;
  const W* wr[8];
  for (int r = 0; r < 8; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  const X* xr[RN];
  for (int t = 0; t < RN; ++t) xr[t] = reinterpret_cast<const X*>(x + t * xs);
  const __m256i offs = row_offsets(ws, kRowsInOrder);
  __m512i spread[4];  // lanes 0-7: row 2p, lanes 8-15: row 2p + 1
  for (int p = 0; p < 4; ++p) {
    spread[p] = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
  }
  __m512 acc[4][RN];
  __m256 mins8[RN];
  for (int t = 0; t < RN; ++t) {
    for (int p = 0; p < 4; ++p) acc[p][t] = _mm512_setzero_ps();
    mins8[t] = _mm256_setzero_ps();
  }
  const TilePrefetch prefetch(w, 8 * ws, nb);
  for (int64_t i = 0; i < nb; ++i) {
    prefetch.at(i);
    __m256i raw;
    const __m512 d16 = _mm512_castps256_ps512(gather_halves(w + i * sizeof(W), offs, &raw));
    if constexpr (R::kHasMin) {  // m is the half after d: the high 16 bits of each gathered word
      const __m256 m8 = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(raw, 16)));
      for (int t = 0; t < RN; ++t) {
        mins8[t] = _mm256_add_ps(mins8[t], _mm256_mul_ps(m8, _mm256_set1_ps(xf[2 * t * nb + nb + i])));
      }
    }
    for (int half = 0; half < 2; ++half) {
      __m512 d[2];
      R rows[2];
      for (int q = 0; q < 2; ++q) {
        const int p = 2 * half + q;
        d[q] = _mm512_permutexvar_ps(spread[p], d16);
        rows[q].load_codes(wr[2 * p][i], wr[2 * p + 1][i]);
      }
      for (int t = 0; t < RN; ++t) {
        const __m512i y2 = _mm512_broadcast_i64x4(load32(xr[t][i].qs));
        const __m512 dx = _mm512_set1_ps(xf[2 * t * nb + i]);
        for (int q = 0; q < 2; ++q) {
          __m512& a = acc[2 * half + q][t];
          a = _mm512_fmadd_ps(_mm512_mul_ps(d[q], dx), dot_lanes(rows[q].u, rows[q].act(y2)), a);
        }
      }
    }
  }
  for (int t = 0; t < RN; ++t) {
    alignas(32) float m[8];
    _mm256_store_ps(m, mins8[t]);
    float* yt = y + t * ys;
    for (int p = 0; p < 4; ++p) {
      if constexpr (R::kHasMin) {
        yt[2 * p] = hsum_lo(acc[p][t]) + m[2 * p];
        yt[2 * p + 1] = hsum_hi(acc[p][t]) + m[2 * p + 1];
      } else {
        yt[2 * p] = hsum_lo(acc[p][t]);
        yt[2 * p + 1] = hsum_hi(acc[p][t]);
      }
    }
  }
}

template <typename R>
void gemm_lanes(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
                int64_t n_tokens, float* y, int64_t ys, void (*edge)(int64_t, const void*, size_t,
                                                                     int64_t, const void*, size_t,
                                                                     int64_t, float*, int64_t)) {
  const int64_t nb = n / kBlock32;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  int64_t r = 0;
  if (n_tokens < kBatchGroup) {
    // Decode, or a step of a few sequences: 8 rows at a time stream by once for up to 4 tokens.
    thread_local std::vector<float> scales;
    scales.resize(static_cast<size_t>(2 * nb * n_tokens));
    token_scales<typename R::X>(nb, xb, xs, n_tokens, scales.data());
    for (; r + 8 <= n_rows; r += 8) {
      int64_t t = 0;
      for (; t + 4 <= n_tokens; t += 4) {
        gemv8<R, 4>(nb, wb + r * ws, ws, xb + t * xs, xs, scales.data() + 2 * t * nb,
                    y + t * ys + r, ys);
      }
      const uint8_t* xt = xb + t * xs;
      const float* ft = scales.data() + 2 * t * nb;
      float* yt = y + t * ys + r;
      switch (n_tokens - t) {
        case 3: gemv8<R, 3>(nb, wb + r * ws, ws, xt, xs, ft, yt, ys); break;
        case 2: gemv8<R, 2>(nb, wb + r * ws, ws, xt, xs, ft, yt, ys); break;
        case 1: gemv8<R, 1>(nb, wb + r * ws, ws, xt, xs, ft, yt, ys); break;
        default: break;
      }
    }
  } else {
    for (; r + 4 <= n_rows; r += 4) {
      int64_t t = 0;
      for (; t + 4 <= n_tokens; t += 4) {
        tile<R, 4, 4>(nb, wb + r * ws, ws, xb + t * xs, xs, y + t * ys + r, ys);
      }
      for (; t < n_tokens; ++t) tile<R, 4, 1>(nb, wb + r * ws, ws, xb + t * xs, xs, y + t * ys + r, ys);
    }
  }
  // Rows left over: the AVX2 kernel (same order).
  if (r < n_rows) edge(n, wb + r * ws, ws, n_rows - r, x, xs, n_tokens, y + r, ys);
}

// ---- Q4_0 x Q8_0 in the repacked order, and Q8_0 x Q8_0 in the same block order (the AMX and
// AVX-512 tiers' order for Q8_0: vec_dot_q8_0_blocks): per output and block the exact integer
// sum, then acc = fma(float(sum), d_w * d_x, acc); the fused multiply-adds of 16 (prefill) or 8
// (decode) outputs share one register. Codes are used unsigned, c = q + kOffset (Q4_0: the
// nibble, q + 8; Q8_0: q ^ 0x80 = q + 128): sum(q * y) = sum(c * y) - kOffset * sum(y), exact in
// int32.

// Two rows' block codes, unsigned: block a's 32 in the low half, b's in the high half.
struct Q4_0Codes {
  using W = BlockQ4_0;
  static constexpr int kOffsetShift = 3;  // kOffset = 8
  static __m512i load2(const W& a, const W& b) { return unpack2(a.qs, b.qs); }
};
struct Q8_0Codes {
  using W = BlockQ8_0;
  static constexpr int kOffsetShift = 7;  // kOffset = 128
  static __m512i load2(const W& a, const W& b) {
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(load32(a.qs)), load32(b.qs), 1);
    return _mm512_xor_si512(w, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};

// Z[k] (k < 4): rows 2k (low half) and 2k+1 (high half), 8 int32 partial sums each.
// Returns the 8 totals in the order rows 0, 2, 4, 6, 1, 3, 5, 7 (see kRowOrder8).
inline __m256i reduce_pairs4(const __m512i z[4]) {
  const __m512i w01 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
  const __m512i w23 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
  // Per 128-bit chunk c: [z0 chunk sum, z1, z2, z3].
  const __m512i v = _mm512_add_epi32(_mm512_unpacklo_epi64(w01, w23), _mm512_unpackhi_epi64(w01, w23));
  // chunks 0 + 1: low halves (rows 0, 2, 4, 6); chunks 2 + 3: high halves (rows 1, 3, 5, 7).
  const __m256i lo = _mm512_castsi512_si256(v);
  const __m256i hi = _mm512_extracti64x4_epi64(v, 1);
  const __m256i a = _mm256_permute2x128_si256(lo, hi, 0x20);  // chunk0 | chunk2
  const __m256i b = _mm256_permute2x128_si256(lo, hi, 0x31);  // chunk1 | chunk3
  return _mm256_add_epi32(a, b);
}


// 8 rows x 1 token (decode). Lane order of the accumulator: rows 0, 2, 4, 6, 1, 3, 5, 7 (the
// order reduce_pairs4 leaves the sums in; the scales are gathered in that order too).
// corr[i] = kOffset * sum(y) and dx[i] = d_x of the activation's block i, prepared once per call.
constexpr int kRowOrder8[8] = {0, 2, 4, 6, 1, 3, 5, 7};

template <typename C>
inline void blocks_8x1(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x,
                       const int32_t* corr, const float* dx, float* y) {
  using W = typename C::W;
  const W* wr[8];
  for (int r = 0; r < 8; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  const BlockQ8_0* xb = reinterpret_cast<const BlockQ8_0*>(x);
  const __m256i offs = row_offsets(ws, kRowOrder8);
  __m256 acc = _mm256_setzero_ps();
  const TilePrefetch prefetch(w, 8 * ws, nb);
  for (int64_t i = 0; i < nb; ++i) {
    prefetch.at(i);
    const __m512i y2 = _mm512_broadcast_i64x4(load32(xb[i].qs));
    __m512i z[4];
    for (int p = 0; p < 4; ++p) {
      z[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), C::load2(wr[2 * p][i], wr[2 * p + 1][i]), y2);
    }
    const __m256i sums = _mm256_sub_epi32(reduce_pairs4(z), _mm256_set1_epi32(corr[i]));
    __m256i raw;
    const __m256 dw = gather_halves(w + i * sizeof(W), offs, &raw);
    const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(dx[i]));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), d, acc);
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, acc);
  for (int k = 0; k < 8; ++k) y[kRowOrder8[k]] = out[k];
}

// What a 4 x 4 tile needs of its four tokens' block i, prepared once per token group:
// corr lane 4r + t = kOffset * sum(y_t), dx lane 4r + t = d_x of token t.
struct TokenBlock4 {
  __m512i corr;
  __m512 dx;
};

template <typename C>
inline void prepare_tokens4(int64_t nb, const uint8_t* x, size_t xs, TokenBlock4* out) {
  const BlockQ8_0* xr[4];
  for (int t = 0; t < 4; ++t) xr[t] = reinterpret_cast<const BlockQ8_0*>(x + t * xs);
  for (int64_t i = 0; i < nb; ++i) {
    const __m128i s = _mm_setr_epi32(sum_i8(xr[0][i].qs), sum_i8(xr[1][i].qs), sum_i8(xr[2][i].qs),
                                     sum_i8(xr[3][i].qs));
    out[i].corr = _mm512_broadcast_i32x4(_mm_slli_epi32(s, C::kOffsetShift));
    const __m128 dx4 = _mm_cvtph_ps(_mm_setr_epi16(
        static_cast<short>(xr[0][i].d), static_cast<short>(xr[1][i].d),
        static_cast<short>(xr[2][i].d), static_cast<short>(xr[3][i].d), 0, 0, 0, 0));
    out[i].dx = _mm512_broadcast_f32x4(dx4);
  }
}

// 4 rows x 4 tokens (prefill). Accumulator lane 4 * r + t holds output (r, t).
template <typename C>
inline void blocks_4x4(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                       const TokenBlock4* tb, float* y, int64_t ys) {
  using W = typename C::W;
  const W* wr[4];
  const BlockQ8_0* xr[4];
  for (int r = 0; r < 4; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  for (int t = 0; t < 4; ++t) xr[t] = reinterpret_cast<const BlockQ8_0*>(x + t * xs);
  __m512 acc = _mm512_setzero_ps();
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  for (int64_t i = 0; i < nb; ++i) {
    const __m512i u01 = C::load2(wr[0][i], wr[1][i]);
    const __m512i u23 = C::load2(wr[2][i], wr[3][i]);
    // z[t] = rows 0|1 x token t, z[4 + t] = rows 2|3 x token t.
    __m512i z[8];
    for (int t = 0; t < 4; ++t) {
      const __m512i y2 = _mm512_broadcast_i64x4(load32(xr[t][i].qs));
      z[t] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u01, y2);
      z[4 + t] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u23, y2);
    }
    // Per 128-bit chunk, pairs z[t], z[t + 1] -> [a, b, a, b] partials.
    const __m512i w01 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
    const __m512i w23 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
    const __m512i w45 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[4], z[5]), _mm512_unpackhi_epi32(z[4], z[5]));
    const __m512i w67 = _mm512_add_epi32(_mm512_unpacklo_epi32(z[6], z[7]), _mm512_unpackhi_epi32(z[6], z[7]));
    // Per chunk c: [t0, t1, t2, t3] sums of that chunk; chunks 0, 1 = row 0 (or 2), 2, 3 = row 1 (or 3).
    const __m512i va = _mm512_add_epi32(_mm512_unpacklo_epi64(w01, w23), _mm512_unpackhi_epi64(w01, w23));
    const __m512i vb = _mm512_add_epi32(_mm512_unpacklo_epi64(w45, w67), _mm512_unpackhi_epi64(w45, w67));
    // [va c0 + c1, va c2 + c3, vb c0 + c1, vb c2 + c3] = rows 0, 1, 2, 3.
    const __m512i even = _mm512_shuffle_i32x4(va, vb, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i odd = _mm512_shuffle_i32x4(va, vb, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i sums = _mm512_sub_epi32(_mm512_add_epi32(even, odd), tb[i].corr);
    const __m128 dw4 = _mm_cvtph_ps(_mm_setr_epi16(
        static_cast<short>(wr[0][i].d), static_cast<short>(wr[1][i].d),
        static_cast<short>(wr[2][i].d), static_cast<short>(wr[3][i].d), 0, 0, 0, 0));
    const __m512 dw = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(dw4));
    const __m512 d = _mm512_mul_ps(dw, tb[i].dx);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), d, acc);
  }
  alignas(64) float out[16];
  _mm512_store_ps(out, acc);
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < 4; ++t) y[t * ys + r] = out[4 * r + t];
  }
}

// ---- Q8_0 in block order: what the 8-row and 4 x 4 kernels above leave.

// One row x 1 token (the rows left over by the 8-row kernel, and runs of single rows).
inline float q8_0_blk_1x1(int64_t nb, const uint8_t* w, const uint8_t* x, const int32_t* corr,
                          const float* dx) {
  const BlockQ8_0* wr = reinterpret_cast<const BlockQ8_0*>(w);
  const BlockQ8_0* xb = reinterpret_cast<const BlockQ8_0*>(x);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));  // Q8_0Codes
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i u = _mm256_xor_si256(load32(wr[i].qs), flip);
    const int32_t sum = hsum(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, load32(xb[i].qs))) - corr[i];
    // One fused multiply-add, as std::fma (no standard-library code in this file: avx512_util.h).
    acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(static_cast<float>(sum)),
                                     _mm_set_ss(half_to_float(wr[i].d) * dx[i]), _mm_set_ss(acc)));
  }
  return acc;
}

// ---- F16 x F16, prefill: 4 rows x 4 tokens, one 16-lane accumulator per output over k in
// steps of 16, then a horizontal sum. Another order than the AVX2 F16 tiles (8 lanes): like
// them, equal to vec_dot_f16 only within float rounding.
inline __m512 load_f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline void f16_4x4(int64_t n, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs, float* y,
                    int64_t ys) {
  const uint16_t* wr[4];
  const uint16_t* xr[4];
  for (int r = 0; r < 4; ++r) wr[r] = reinterpret_cast<const uint16_t*>(w + r * ws);
  for (int t = 0; t < 4; ++t) xr[t] = reinterpret_cast<const uint16_t*>(x + t * xs);
  __m512 acc[4][4];
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < 4; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < n; k += 16) {
    __m512 a[4];
    for (int r = 0; r < 4; ++r) a[r] = load_f16x16(wr[r] + k);
    for (int t = 0; t < 4; ++t) {
      const __m512 b = load_f16x16(xr[t] + k);
      for (int r = 0; r < 4; ++r) acc[r][t] = _mm512_fmadd_ps(a[r], b, acc[r][t]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < 4; ++t) y[t * ys + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

}  // namespace

// Batches this big decode the weights into panels (avx512_panels.cpp); the decoding pays for
// itself across their tokens.
constexpr int64_t kPanelTokens = 16;

void gemm_f16(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
              int64_t n_tokens, float* y, int64_t ys) {
  if (n % 16 != 0 || n_tokens < 4 || n_rows < 4) {  // decode (memory-bound) and odd shapes
    avx2::gemm_f16(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
    return;
  }
  if (n_tokens >= kPanelTokens) {
    gemm_f16_panels(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
    return;
  }
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  const int64_t r_end = n_rows / 4 * 4;
  const int64_t t_end = n_tokens / 4 * 4;
  for (int64_t r = 0; r < r_end; r += 4) {
    for (int64_t t = 0; t < t_end; t += 4) f16_4x4(n, wb + r * ws, ws, xb + t * xs, xs, y + t * ys + r, ys);
  }
  if (t_end < n_tokens) {
    avx2::gemm_f16(n, w, ws, r_end, xb + t_end * xs, xs, n_tokens - t_end, y + t_end * ys, ys);
  }
  if (r_end < n_rows) avx2::gemm_f16(n, wb + r_end * ws, ws, n_rows - r_end, x, xs, n_tokens, y + r_end, ys);
}

void gemm_q4_1(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys) {
  gemm_lanes<Q4_1Rows>(n, w, ws, n_rows, x, xs, n_tokens, y, ys, avx2::gemm_q4_1);
}

void gemm_q5_0(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys) {
  gemm_lanes<Q5_0Rows>(n, w, ws, n_rows, x, xs, n_tokens, y, ys, avx2::gemm_q5_0);
}

void gemm_q8_0(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys) {
  gemm_lanes<Q8_0Rows>(n, w, ws, n_rows, x, xs, n_tokens, y, ys, avx2::gemm_q8_0);
}

void gemm_q8_0_blocks(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                      size_t xs, int64_t n_tokens, float* y, int64_t ys) {
  constexpr int64_t kMaxBlocks = 256;  // longer rows: the scalar twin
  const int64_t nb = n / kBlock32;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  if (nb > kMaxBlocks) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t r = 0; r < n_rows; ++r) {
        y[t * ys + r] = scalar::vec_dot_q8_0_blocks(n, wb + r * ws, xb + t * xs);
      }
    }
    return;
  }
  if (n_tokens >= kPanelTokens) {
    gemm_q8_0_panels(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
    return;
  }
  // 4 x 4 tiles over the first t_end tokens and r_end rows (token groups outer, their block sums
  // and scales prepared once); the rest token by token, 8 rows at a time, then single rows.
  const int64_t t_end = n_rows >= 4 ? n_tokens / 4 * 4 : 0;
  const int64_t r_end = n_rows / 4 * 4;
  if (t_end > 0) {
    alignas(64) TokenBlock4 tb[kMaxBlocks];
    for (int64_t t = 0; t < t_end; t += 4) {
      prepare_tokens4<Q8_0Codes>(nb, xb + t * xs, xs, tb);
      for (int64_t r = 0; r < r_end; r += 4) {
        blocks_4x4<Q8_0Codes>(nb, wb + r * ws, ws, xb + t * xs, xs, tb, y + t * ys + r, ys);
      }
    }
  }
  int32_t corr[kMaxBlocks];
  float dx[kMaxBlocks];
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t r0 = t < t_end ? r_end : 0;
    if (r0 == n_rows) continue;
    const uint8_t* xt = xb + t * xs;
    const BlockQ8_0* xq = reinterpret_cast<const BlockQ8_0*>(xt);
    for (int64_t i = 0; i < nb; ++i) {
      corr[i] = 128 * sum_i8(xq[i].qs);
      dx[i] = half_to_float(xq[i].d);
    }
    int64_t r = r0;
    for (; r + 8 <= n_rows; r += 8) blocks_8x1<Q8_0Codes>(nb, wb + r * ws, ws, xt, corr, dx, y + t * ys + r);
    for (; r < n_rows; ++r) y[t * ys + r] = q8_0_blk_1x1(nb, wb + r * ws, xt, corr, dx);
  }
}

void gemm_q4_0_repacked(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                        size_t xs, int64_t n_tokens, float* y, int64_t ys) {
  // Rows of up to 256 blocks (8192 columns) take the 4 x 4 tiles; longer ones the AVX2 code.
  constexpr int64_t kMaxBlocks = 256;
  const int64_t nb = n / kBlock32;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  int64_t r = 0;
  if (n_tokens == 1 && nb <= kMaxBlocks) {
    int32_t corr[kMaxBlocks];
    float dx[kMaxBlocks];
    const BlockQ8_0* xq = static_cast<const BlockQ8_0*>(x);
    for (int64_t i = 0; i < nb; ++i) {
      corr[i] = 8 * sum_i8(xq[i].qs);
      dx[i] = half_to_float(xq[i].d);
    }
    for (; r + 8 <= n_rows; r += 8) blocks_8x1<Q4_0Codes>(nb, wb + r * ws, ws, xb, corr, dx, y + r);
  } else if (n_tokens >= kPanelTokens && nb <= kMaxBlocks) {
    gemm_q4_0_panels(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
    return;
  } else if (n_tokens >= 4 && n_rows >= 4 && nb <= kMaxBlocks) {
    // Token groups outer (their block sums and scales prepared once), rows inner.
    const int64_t t_end = n_tokens / 4 * 4;
    const int64_t r_end = n_rows / 4 * 4;
    alignas(64) TokenBlock4 tb[kMaxBlocks];
    for (int64_t t = 0; t < t_end; t += 4) {
      prepare_tokens4<Q4_0Codes>(nb, xb + t * xs, xs, tb);
      for (int64_t rr = 0; rr < r_end; rr += 4) {
        blocks_4x4<Q4_0Codes>(nb, wb + rr * ws, ws, xb + t * xs, xs, tb, y + t * ys + rr, ys);
      }
    }
    // Tokens left over on these rows: the AVX2 kernel.
    if (t_end < n_tokens) {
      avx2::gemm_q4_0_repacked(n, w, ws, r_end, xb + t_end * xs, xs, n_tokens - t_end, y + t_end * ys, ys);
    }
    r = r_end;
  }
  if (r < n_rows) avx2::gemm_q4_0_repacked(n, wb + r * ws, ws, n_rows - r, x, xs, n_tokens, y + r, ys);
}

}  // namespace squeeze::formats::avx512
