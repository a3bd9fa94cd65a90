// AVX2 tiled matrix products (Kernels::gemm / gemm_repacked) of Q4_0, Q4_1, Q8_0 and the nine
// sq{B}_g{G} weights with Q8_0 / Q8_1 activations, and of F16 weights with F16 activations.
//
// Every output is summed in exactly the order of the format's vec_dot (or vec_dot_repacked),
// so gemm(...) equals a loop of vec_dot calls bit for bit; what changes is the work around it:
//  - a tile of RM weight rows x RN tokens shares each decoded weight block across RN tokens and
//    each activation block across RM rows (prefill: 2 x 4 tiles, 8 accumulators in registers;
//    sq: 1 x 4, as its dot product keeps two accumulators per output);
//  - for one token (decode) rows go four at a time and the weights are prefetched a few
//    kilobytes ahead: decode streams every weight byte once, and the hardware prefetcher
//    alone left the loads waiting on memory (docs/BENCHMARKS.md, "What made it fast").
#include "formats/avx2_util.h"
#include "formats/blocks.h"
#include "formats/format.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx2 {
namespace {

// Decode prefetches the weights this many tiles ahead: the tile's rows lie back to back, so
// the same block of the same row kPrefetchTiles tiles later is RM * ws * kPrefetchTiles bytes on.
constexpr size_t kPrefetchTiles = 4;

inline __m256i load32(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// ---- formats: decode a weight block's codes and its integer dot with an activation block ----

// Weights of signed codes against Q8_0 activations (no min term).
template <typename W_>
struct SignedFmt {
  using W = W_;
  using X = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static __m256i codes(const W& b);
  static __m256i idot(__m256i w, __m256i x) { return dot_i8_i8(w, x); }
  static float m(const W&) { return 0.0f; }
  static float s(const X&) { return 0.0f; }
};
using Q4_0Fmt = SignedFmt<BlockQ4_0>;
using Q5_0Fmt = SignedFmt<BlockQ5_0>;
using Q8_0Fmt = SignedFmt<BlockQ8_0>;
template <>
__m256i Q4_0Fmt::codes(const BlockQ4_0& b) { return _mm256_sub_epi8(unpack_nibbles(b.qs), _mm256_set1_epi8(8)); }
template <>
__m256i Q5_0Fmt::codes(const BlockQ5_0& b) { return q5_0_codes(b.qs, b.qh); }
template <>
__m256i Q8_0Fmt::codes(const BlockQ8_0& b) { return load32(b.qs); }

struct Q4_1Fmt {
  using W = BlockQ4_1;
  using X = BlockQ8_1;
  static constexpr bool kHasMin = true;
  static __m256i codes(const W& b) { return unpack_nibbles(b.qs); }
  static __m256i idot(__m256i w, __m256i x) { return dot_u8_i8(w, x); }
  static float m(const W& b) { return half_to_float(b.m); }
  static float s(const X& b) { return half_to_float(b.s); }
};

// ---- vec_dot order: an 8-lane accumulator per output, d_w * d_x * float(int lanes) fused in
// block by block, horizontal sum at the end, plus (Q4_1) the sum of m_w * s_x in block order.

template <typename F, int RM, int RN>
inline void tile_lanes(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                       float* y, int64_t ys) {
  using W = typename F::W;
  using X = typename F::X;
  const W* wr[RM];
  const X* xr[RN];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const W*>(w + r * ws);
  for (int t = 0; t < RN; ++t) xr[t] = reinterpret_cast<const X*>(x + t * xs);
  __m256 acc[RM][RN];
  float mins[RM][RN];
  for (int r = 0; r < RM; ++r) {
    for (int t = 0; t < RN; ++t) {
      acc[r][t] = _mm256_setzero_ps();
      mins[r][t] = 0.0f;
    }
  }
  for (int64_t i = 0; i < nb; ++i) {
    __m256i q[RM];
    __m256 dw[RM];
    float mw[RM];
    for (int r = 0; r < RM; ++r) {
      if (RN == 1) {
        _mm_prefetch(reinterpret_cast<const char*>(wr[r] + i) + kPrefetchTiles * RM * ws, _MM_HINT_T0);
      }
      q[r] = F::codes(wr[r][i]);
      dw[r] = broadcast_half(wr[r][i].d);
      if (F::kHasMin) mw[r] = F::m(wr[r][i]);
    }
    for (int t = 0; t < RN; ++t) {
      const __m256i xq = load32(xr[t][i].qs);
      const __m256 dx = broadcast_half(xr[t][i].d);
      const float sx = F::kHasMin ? F::s(xr[t][i]) : 0.0f;
      for (int r = 0; r < RM; ++r) {
        // d_w * d_x in every lane: the same float product vec_dot broadcasts.
        const __m256 d = _mm256_mul_ps(dw[r], dx);
        acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(F::idot(q[r], xq)), acc[r][t]);
        if (F::kHasMin) mins[r][t] += mw[r] * sx;
      }
    }
  }
  for (int r = 0; r < RM; ++r) {
    for (int t = 0; t < RN; ++t) {
      y[t * ys + r] = F::kHasMin ? hsum(acc[r][t]) + mins[r][t] : hsum(acc[r][t]);
    }
  }
}

// ---- repacked order (Q4_0 where llama.cpp repacks): per block, the exact int sum, then one
// fused multiply-add per output: acc = fma(float(sum), d_w * d_x, acc). Eight outputs (a 2 x 4
// tile) share one vector: their int sums are reduced into the lanes of one register.

// Lane k = total of v[k] (integer sums are exact in any order).
inline __m256i reduce8(const __m256i v[8]) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]);
  const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i h0123 = _mm256_hadd_epi32(h01, h23);  // lo: v0..v3 low halves | hi: high halves
  const __m256i h4567 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                          _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

// 2 rows x 4 tokens; lane 4 * r + t holds output (r, t).
inline void tile_repacked_2x4(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x,
                              size_t xs, float* y, int64_t ys) {
  const BlockQ4_0* w0 = reinterpret_cast<const BlockQ4_0*>(w);
  const BlockQ4_0* w1 = reinterpret_cast<const BlockQ4_0*>(w + ws);
  const BlockQ8_0* xr[4];
  for (int t = 0; t < 4; ++t) xr[t] = reinterpret_cast<const BlockQ8_0*>(x + t * xs);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i q0 = Q4_0Fmt::codes(w0[i]);
    const __m256i q1 = Q4_0Fmt::codes(w1[i]);
    __m256i p[8];
    float dx[4];
    for (int t = 0; t < 4; ++t) {
      const __m256i xq = load32(xr[t][i].qs);
      p[t] = dot_i8_i8(q0, xq);
      p[4 + t] = dot_i8_i8(q1, xq);
      dx[t] = half_to_float(xr[t][i].d);
    }
    const float d0 = half_to_float(w0[i].d);
    const float d1 = half_to_float(w1[i].d);
    const __m256 dw = _mm256_setr_ps(d0, d0, d0, d0, d1, d1, d1, d1);
    const __m128 dx4 = _mm_loadu_ps(dx);
    const __m256 d = _mm256_mul_ps(dw, _mm256_set_m128(dx4, dx4));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(p)), d, acc);
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, acc);
  for (int r = 0; r < 2; ++r) {
    for (int t = 0; t < 4; ++t) y[t * ys + r] = out[4 * r + t];
  }
}

// 8 rows x 1 token (decode); lane r holds row r.
inline void tile_repacked_8x1(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t,
                              float* y, int64_t) {
  const BlockQ4_0* wr[8];
  for (int r = 0; r < 8; ++r) wr[r] = reinterpret_cast<const BlockQ4_0*>(w + r * ws);
  const BlockQ8_0* xb = reinterpret_cast<const BlockQ8_0*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i xq = load32(xb[i].qs);
    __m256i p[8];
    alignas(16) uint16_t dh[8];
    for (int r = 0; r < 8; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(wr[r] + i) + kPrefetchTiles * 8 * ws, _MM_HINT_T0);
      p[r] = dot_i8_i8(Q4_0Fmt::codes(wr[r][i]), xq);
      dh[r] = wr[r][i].d;
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(half_to_float(xb[i].d)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(p)), d, acc);
  }
  _mm256_storeu_ps(y, acc);
}

// RM rows x RN tokens, for the edges: scalar accumulators.
template <int RM, int RN>
inline void tile_repacked(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                          float* y, int64_t ys) {
  const BlockQ4_0* wr[RM];
  const BlockQ8_0* xr[RN];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const BlockQ4_0*>(w + r * ws);
  for (int t = 0; t < RN; ++t) xr[t] = reinterpret_cast<const BlockQ8_0*>(x + t * xs);
  float acc[RM][RN] = {};
  for (int64_t i = 0; i < nb; ++i) {
    __m256i q[RM];
    float dw[RM];
    for (int r = 0; r < RM; ++r) {
      if (RN == 1) {
        _mm_prefetch(reinterpret_cast<const char*>(wr[r] + i) + kPrefetchTiles * RM * ws, _MM_HINT_T0);
      }
      q[r] = Q4_0Fmt::codes(wr[r][i]);
      dw[r] = half_to_float(wr[r][i].d);
    }
    for (int t = 0; t < RN; ++t) {
      const __m256i xq = load32(xr[t][i].qs);
      const float dx = half_to_float(xr[t][i].d);
      for (int r = 0; r < RM; ++r) {
        const int32_t sumi = hsum(dot_i8_i8(q[r], xq));
        acc[r][t] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(static_cast<float>(sumi)),
                                               _mm_set_ss(dw[r] * dx), _mm_set_ss(acc[r][t])));
      }
    }
  }
  for (int r = 0; r < RM; ++r) {
    for (int t = 0; t < RN; ++t) y[t * ys + r] = acc[r][t];
  }
}

// ---- drivers: cover rows x tokens with the big tile, then the edges with smaller ones ----

using TileFn = void (*)(int64_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, int64_t);

// big: RM x RN; row_edge: 1 x RN; tok_edge: RM x 1; one: 1 x 1; gemv: DM x 1 for one token.
template <int RM, int RN, int DM>
inline void drive(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
           int64_t n_tokens, float* y, int64_t ys, TileFn big, TileFn row_edge, TileFn tok_edge,
           TileFn one, TileFn gemv) {
  const int64_t nb = n / kBlock32;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  if (n_tokens == 1) {
    int64_t r = 0;
    for (; r + DM <= n_rows; r += DM) gemv(nb, wb + r * ws, ws, xb, xs, y + r, ys);
    for (; r < n_rows; ++r) one(nb, wb + r * ws, ws, xb, xs, y + r, ys);
    return;
  }
  int64_t r = 0;
  for (; r + RM <= n_rows; r += RM) {
    int64_t t = 0;
    for (; t + RN <= n_tokens; t += RN) big(nb, wb + r * ws, ws, xb + t * xs, xs, y + t * ys + r, ys);
    for (; t < n_tokens; ++t) tok_edge(nb, wb + r * ws, ws, xb + t * xs, xs, y + t * ys + r, ys);
  }
  for (; r < n_rows; ++r) {
    int64_t t = 0;
    for (; t + RN <= n_tokens; t += RN) {
      row_edge(nb, wb + r * ws, ws, xb + t * xs, xs, y + t * ys + r, ys);
    }
    for (; t < n_tokens; ++t) one(nb, wb + r * ws, ws, xb + t * xs, xs, y + t * ys + r, ys);
  }
}

template <typename F>
void gemm_lanes(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
                int64_t n_tokens, float* y, int64_t ys) {
  drive<2, 4, 4>(n, w, ws, n_rows, x, xs, n_tokens, y, ys, tile_lanes<F, 2, 4>,
                 tile_lanes<F, 1, 4>, tile_lanes<F, 2, 1>, tile_lanes<F, 1, 1>,
                 tile_lanes<F, 4, 1>);
}

// ---- F16 x F16: one 8-lane accumulator per output over k in steps of 8, then the horizontal
// sum (tinyBLAS's order, which llama.cpp uses for F16 batches); not vec_dot_f16's 4 x 8 lanes,
// so equal to it only within float rounding (the float formats' dot products are not bit-exact
// across paths anyway: the scalar twin sums in double).

inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <int RM, int RN>
inline void tile_f16(int64_t n, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                     float* y, int64_t ys) {
  const uint16_t* wr[RM];
  const uint16_t* xr[RN];
  for (int r = 0; r < RM; ++r) wr[r] = reinterpret_cast<const uint16_t*>(w + r * ws);
  for (int t = 0; t < RN; ++t) xr[t] = reinterpret_cast<const uint16_t*>(x + t * xs);
  __m256 acc[RM][RN];
  for (int r = 0; r < RM; ++r) {
    for (int t = 0; t < RN; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < n; k += 8) {
    __m256 a[RM];
    for (int r = 0; r < RM; ++r) {
      if (RN == 1) {
        _mm_prefetch(reinterpret_cast<const char*>(wr[r] + k) + kPrefetchTiles * RM * ws, _MM_HINT_T0);
      }
      a[r] = load_f16x8(wr[r] + k);
    }
    for (int t = 0; t < RN; ++t) {
      const __m256 b = load_f16x8(xr[t] + k);
      for (int r = 0; r < RM; ++r) acc[r][t] = _mm256_fmadd_ps(a[r], b, acc[r][t]);
    }
  }
  for (int r = 0; r < RM; ++r) {
    for (int t = 0; t < RN; ++t) y[t * ys + r] = hsum(acc[r][t]);
  }
}

// n a multiple of 8 (the matmul shapes); other n take the plain dot.
void gemm_f16_8(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
                int64_t n_tokens, float* y, int64_t ys) {
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  if (n_tokens == 1) {
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4) tile_f16<4, 1>(n, wb + r * ws, ws, xb, xs, y + r, ys);
    for (; r < n_rows; ++r) tile_f16<1, 1>(n, wb + r * ws, ws, xb, xs, y + r, ys);
    return;
  }
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    int64_t t = 0;
    for (; t + 2 <= n_tokens; t += 2) tile_f16<4, 2>(n, wb + r * ws, ws, xb + t * xs, xs, y + t * ys + r, ys);
    for (; t < n_tokens; ++t) tile_f16<4, 1>(n, wb + r * ws, ws, xb + t * xs, xs, y + t * ys + r, ys);
  }
  for (; r < n_rows; ++r) {
    for (int64_t t = 0; t < n_tokens; ++t) tile_f16<1, 1>(n, wb + r * ws, ws, xb + t * xs, xs, y + t * ys + r, ys);
  }
}

// ---- sq{B}_g{G} x Q8_1 in vec_dot_sq's order (avx2_sq.cpp): per output two 8-lane
// accumulators, sub-block s of the row fused into accumulator s % 2 (by d_w * d_x) and its
// m_w * s_x added to the float sum s % 2; at the end hsum(acc0 + acc1) + (mins0 + mins1).
// Two accumulators per output leave room for 4 outputs in registers: tiles are 1 row x 4 tokens
// in prefill (decoding a sub-block, the costly part, once for 4 tokens) and 4 rows x 1 token in
// decode. Tokens go in groups of up to 4, whose activation scales are converted once
// (SqTokens) and then serve every row.

// Decode streams the weights once: the tile kPrefetchTiles ahead (its rows lie back to back,
// tile_bytes in all) is prefetched a few cache lines per group, spread over the group loop.
class TilePrefetch {
 public:
  TilePrefetch(const uint8_t* tile, size_t tile_bytes, int64_t n_steps)
      : next_(reinterpret_cast<const char*>(tile) + kPrefetchTiles * tile_bytes),
        lines_(static_cast<int64_t>((tile_bytes + 63) / 64)),
        step_(n_steps > 0 ? (lines_ + n_steps - 1) / n_steps : 0) {}
  // Before step i.
  void at(int64_t i) const {
    for (int64_t l = i * step_; l < (i + 1) * step_ && l < lines_; ++l) _mm_prefetch(next_ + l * 64, _MM_HINT_T0);
  }

 private:
  const char* next_;
  int64_t lines_;
  int64_t step_;
};

constexpr size_t kSqHeader = 4;  // half d, half m
template <int B, int G>
constexpr size_t kSqBlockBytes = kSqHeader + static_cast<size_t>(G * B / 8);

// Block s of a group's tokens: d and s as floats (0 for tokens past the group's end).
struct SqTokens {
  float dx[4];
  float sx[4];
};

inline void sq_prepare(int64_t nsub, const uint8_t* x, size_t xs, int n_tok, SqTokens* out) {
  const BlockQ8_1* xr[4];
  for (int t = 0; t < n_tok; ++t) xr[t] = reinterpret_cast<const BlockQ8_1*>(x + t * xs);
  for (int64_t s = 0; s < nsub; ++s) {
    for (int t = 0; t < 4; ++t) {
      out[s].dx[t] = t < n_tok ? half_to_float(xr[t][s].d) : 0.0f;
      out[s].sx[t] = t < n_tok ? half_to_float(xr[t][s].s) : 0.0f;
    }
  }
}

// Up to kSqStackSubs blocks of prepared tokens live on the stack, longer rows on the heap.
constexpr int64_t kSqStackSubs = 512;

class SqTokenBuffer {
 public:
  explicit SqTokenBuffer(int64_t nsub) : p_(nsub <= kSqStackSubs ? stack_ : new SqTokens[nsub]) {}
  ~SqTokenBuffer() {
    if (p_ != stack_) delete[] p_;
  }
  SqTokenBuffer(const SqTokenBuffer&) = delete;
  SqTokenBuffer& operator=(const SqTokenBuffer&) = delete;
  SqTokens* get() { return p_; }

 private:
  alignas(32) SqTokens stack_[kSqStackSubs];
  SqTokens* p_;
};

template <int P>
struct Parity {};

// RM rows x RN tokens (RM == 1 or RN == 1). Locals, not members, so that the accumulators stay
// in registers; mins lane r * RN + t holds output (r, t).
template <int B, int G, int RM, int RN, bool kPrefetch>
void sq_tile(int64_t n_groups, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
             const SqTokens* tk, float* y, int64_t ys) {
  static_assert(RM * RN <= 4 && (RM == 1 || RN == 1));
  constexpr int kSubs = G / 32;
  const TilePrefetch prefetch(w, RM * ws, n_groups);
  const uint8_t* wr[RM];
  const BlockQ8_1* xr[RN];
  for (int r = 0; r < RM; ++r) wr[r] = w + r * ws;
  for (int t = 0; t < RN; ++t) xr[t] = reinterpret_cast<const BlockQ8_1*>(x + t * xs);
  __m256 acc[2][RM][RN];
  __m128 mins[2];
  for (int p = 0; p < 2; ++p) {
    mins[p] = _mm_setzero_ps();
    for (int r = 0; r < RM; ++r) {
      for (int t = 0; t < RN; ++t) acc[p][r][t] = _mm256_setzero_ps();
    }
  }
  alignas(16) float dw[4];  // d of each row (broadcast from memory where used)
  __m128 mw;                // m_r in lanes r * RN + t
  // The scales of group g. (Registers, not small stores into an array: a wide load of
  // narrow stores would stall on store forwarding.)
  auto group = [&](int64_t g) __attribute__((always_inline)) {
    const size_t off = g * kSqBlockBytes<B, G>;
    if constexpr (RM == 1) {
      uint32_t h;
      std::memcpy(&h, wr[0] + off, sizeof h);
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h)));  // d, m
      _mm_store_ss(dw, dm);
      mw = _mm_permute_ps(dm, 0x55);
    } else {
      int32_t h[4] = {};  // d | m << 16 of each row
      for (int r = 0; r < RM; ++r) std::memcpy(&h[r], wr[r] + off, sizeof h[r]);
      // [d0 d1 d2 d3 m0 m1 m2 m3] as halves, then as floats.
      const __m128i v = _mm_shuffle_epi8(_mm_setr_epi32(h[0], h[1], h[2], h[3]),
                                         _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
      const __m256 dm = _mm256_cvtph_ps(v);
      _mm_store_ps(dw, _mm256_castps256_ps128(dm));
      mw = _mm256_extractf128_ps(dm, 1);
    }
  };
  // Sub-block k of group g (the row's sub-block s) into the accumulators of parity P.
  auto sub = [&]<int P>(Parity<P>, int64_t g, int k) __attribute__((always_inline)) {
    const int64_t s = g * kSubs + k;
    const size_t off = g * kSqBlockBytes<B, G> + kSqHeader + 4 * B * k;
    if constexpr (RN == 1) {
      const __m256i xq = load32(xr[0][s].qs);
      // d_w * d_x of every row (the float products vec_dot broadcasts), broadcast from memory.
      alignas(16) float d[4];
      _mm_store_ps(d, _mm_mul_ps(_mm_load_ps(dw), _mm_broadcast_ss(&tk[s].dx[0])));
      for (int r = 0; r < RM; ++r) {
        const __m256i q = sq_sub_block_codes<B>(wr[r] + off);
        acc[P][r][0] = _mm256_fmadd_ps(_mm256_broadcast_ss(&d[r]),
                                       _mm256_cvtepi32_ps(dot_u8_i8(q, xq)), acc[P][r][0]);
      }
      mins[P] = _mm_add_ps(mins[P], _mm_mul_ps(mw, _mm_broadcast_ss(&tk[s].sx[0])));
    } else {
      const __m256i q = sq_sub_block_codes<B>(wr[0] + off);
      const __m256 d = _mm256_broadcast_ss(&dw[0]);
      for (int t = 0; t < RN; ++t) {
        const __m256i xq = load32(xr[t][s].qs);
        // d_w * d_x in every lane: the float product vec_dot broadcasts.
        acc[P][0][t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_broadcast_ss(&tk[s].dx[t])),
                                       _mm256_cvtepi32_ps(dot_u8_i8(q, xq)), acc[P][0][t]);
      }
      mins[P] = _mm_add_ps(mins[P], _mm_mul_ps(mw, _mm_loadu_ps(tk[s].sx)));
    }
  };
  if constexpr (kSubs == 1) {
    // One sub-block per group: alternate groups take the two accumulators.
    int64_t g = 0;
    for (; g + 1 < n_groups; g += 2) {
      if constexpr (kPrefetch) {
        prefetch.at(g);
        prefetch.at(g + 1);
      }
      group(g);
      sub(Parity<0>{}, g, 0);
      group(g + 1);
      sub(Parity<1>{}, g + 1, 0);
    }
    if (g < n_groups) {
      if constexpr (kPrefetch) prefetch.at(g);
      group(g);
      sub(Parity<0>{}, g, 0);
    }
  } else {
    for (int64_t g = 0; g < n_groups; ++g) {
      if constexpr (kPrefetch) prefetch.at(g);
      group(g);
      for (int k = 0; k < kSubs; k += 2) {
        sub(Parity<0>{}, g, k);
        sub(Parity<1>{}, g, k + 1);
      }
    }
  }
  alignas(16) float m[4];
  _mm_store_ps(m, _mm_add_ps(mins[0], mins[1]));
  for (int r = 0; r < RM; ++r) {
    for (int t = 0; t < RN; ++t) {
      y[t * ys + r] = hsum(_mm256_add_ps(acc[0][r][t], acc[1][r][t])) + m[r * RN + t];
    }
  }
}

template <int B, int G, int RM, int RN, bool kPrefetch>
inline void sq_rows(int64_t n_groups, const uint8_t* w, size_t ws, int64_t n_rows,
                    const uint8_t* x, size_t xs, const SqTokens* tk, float* y, int64_t ys) {
  int64_t r = 0;
  for (; r + RM <= n_rows; r += RM) {
    sq_tile<B, G, RM, RN, kPrefetch>(n_groups, w + r * ws, ws, x, xs, tk, y + r, ys);
  }
  for (; r < n_rows; ++r) {
    sq_tile<B, G, 1, RN, kPrefetch>(n_groups, w + r * ws, ws, x, xs, tk, y + r, ys);
  }
}

template <int B, int G>
void gemm_sq(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
             int64_t n_tokens, float* y, int64_t ys) {
  const int64_t n_groups = n / G;
  const int64_t nsub = n / kBlock32;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  SqTokenBuffer buf(nsub);
  SqTokens* tk = buf.get();
  // Fewer than 4 tokens (decode): memory bound, the weights are prefetched.
  for (int64_t t = 0; t < n_tokens; t += 4) {
    const int rn = n_tokens - t < 4 ? static_cast<int>(n_tokens - t) : 4;
    const uint8_t* xt = xb + t * xs;
    float* yt = y + t * ys;
    sq_prepare(nsub, xt, xs, rn, tk);
    if (n_tokens < 4) {
      switch (rn) {
        case 1: sq_rows<B, G, 4, 1, true>(n_groups, wb, ws, n_rows, xt, xs, tk, yt, ys); break;
        case 2: sq_rows<B, G, 1, 2, true>(n_groups, wb, ws, n_rows, xt, xs, tk, yt, ys); break;
        default: sq_rows<B, G, 1, 3, true>(n_groups, wb, ws, n_rows, xt, xs, tk, yt, ys); break;
      }
    } else {
      switch (rn) {
        case 1: sq_rows<B, G, 4, 1, false>(n_groups, wb, ws, n_rows, xt, xs, tk, yt, ys); break;
        case 2: sq_rows<B, G, 1, 2, false>(n_groups, wb, ws, n_rows, xt, xs, tk, yt, ys); break;
        case 3: sq_rows<B, G, 1, 3, false>(n_groups, wb, ws, n_rows, xt, xs, tk, yt, ys); break;
        default: sq_rows<B, G, 1, 4, false>(n_groups, wb, ws, n_rows, xt, xs, tk, yt, ys); break;
      }
    }
  }
}

}  // namespace

void gemm_f16(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
              int64_t n_tokens, float* y, int64_t ys) {
  if (n % 8 == 0) {
    gemm_f16_8(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
    return;
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < n_rows; ++r) {
      y[t * ys + r] = vec_dot_f16(n, static_cast<const uint8_t*>(w) + r * ws,
                                  static_cast<const uint8_t*>(x) + t * xs);
    }
  }
}

void gemm_q4_0(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys) {
  gemm_lanes<Q4_0Fmt>(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
}

void gemm_q4_1(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys) {
  gemm_lanes<Q4_1Fmt>(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
}

void gemm_q5_0(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys) {
  gemm_lanes<Q5_0Fmt>(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
}

void gemm_q8_0(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys) {
  gemm_lanes<Q8_0Fmt>(n, w, ws, n_rows, x, xs, n_tokens, y, ys);
}

void gemm_q4_0_repacked(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                        size_t xs, int64_t n_tokens, float* y, int64_t ys) {
  drive<2, 4, 8>(n, w, ws, n_rows, x, xs, n_tokens, y, ys, tile_repacked_2x4,
                 tile_repacked<1, 4>, tile_repacked<2, 1>, tile_repacked<1, 1>,
                 tile_repacked_8x1);
}

GemmFn sq_gemm(DType t) {
  switch (t) {
    case DType::SQ2_G32: return gemm_sq<2, 32>;
    case DType::SQ2_G64: return gemm_sq<2, 64>;
    case DType::SQ2_G128: return gemm_sq<2, 128>;
    case DType::SQ3_G32: return gemm_sq<3, 32>;
    case DType::SQ3_G64: return gemm_sq<3, 64>;
    case DType::SQ3_G128: return gemm_sq<3, 128>;
    case DType::SQ4_G32: return gemm_sq<4, 32>;
    case DType::SQ4_G64: return gemm_sq<4, 64>;
    case DType::SQ4_G128: return gemm_sq<4, 128>;
    default: return nullptr;
  }
}

}  // namespace squeeze::formats::avx2
