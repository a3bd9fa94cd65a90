// AVX-512 tiles of the sq{B}_g{G} formats, bit-identical to the AVX2 ones (avx2_gemm.cpp) and
// so to loops of vec_dot_sq: a 512-bit register holds two rows' accumulators of one parity
// (two per output), so 16 registers hold a 4 x 4 tile. Called only after cpu_has_avx512()
// (core/cpu.h).
#include "formats/avx512_util.h"
#include "formats/blocks.h"
#include "formats/format.h"
#include "formats/kernel_list.h"
#include "formats/sq.h"

namespace squeeze::formats::avx512 {
namespace {

// ---- sq{B}_g{G} x Q8_1 in vec_dot_sq's order (avx2_sq.cpp, and the AVX2 tiles in
// avx2_gemm.cpp): per output two 8-lane accumulators, sub-block s of the row fused into
// accumulator s % 2 and its m_w * s_x added to the float sum s % 2; at the end
// hsum(acc0 + acc1) + (mins0 + mins1). A 512-bit register holds two rows' accumulators of one
// parity (as the Q4_1 tiles), so a 4 x 4 tile takes 16 registers. Tokens go in groups of up to
// 4 whose activation scales are converted once (SqTokens) and then serve every row tile.

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
  alignas(64) SqTokens stack_[kSqStackSubs];
  SqTokens* p_;
};

// One sub-block's 32 codes of row a (low half) and of row b (high half), as bytes in element
// order (layout in scalar_sq.cpp).
template <int B>
inline __m512i sq_codes2(const uint8_t* a, const uint8_t* b) {
  if constexpr (B == 4) {
    return unpack2(a, b);
  } else {
    // 64-bit lane c of each half: bits 2c, 2c + 1 of the 8 bytes (elements 8c..8c+7).
    uint64_t la, lb;
    std::memcpy(&la, a, sizeof la);
    std::memcpy(&lb, b, sizeof lb);
    const __m512i low =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi64x(static_cast<long long>(la))),
                           _mm256_set1_epi64x(static_cast<long long>(lb)), 1);
    __m512i q = _mm512_and_si512(_mm512_srlv_epi64(low, _mm512_setr_epi64(0, 2, 4, 6, 0, 2, 4, 6)),
                                 _mm512_set1_epi8(3));
    if constexpr (B == 3) {
      // 32-bit lane c of each half: bit c of the 4 bytes is bit 2 of elements 4c..4c+3.
      uint32_t ha, hb;
      std::memcpy(&ha, a + 8, sizeof ha);
      std::memcpy(&hb, b + 8, sizeof hb);
      const __m512i high =
          _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(static_cast<int>(ha))),
                             _mm256_set1_epi32(static_cast<int>(hb)), 1);
      const __m512i bit_c = _mm512_setr_epi32(
          0x01010101, 0x02020202, 0x04040404, 0x08080808, 0x10101010, 0x20202020, 0x40404040,
          static_cast<int>(0x80808080u), 0x01010101, 0x02020202, 0x04040404, 0x08080808,
          0x10101010, 0x20202020, 0x40404040, static_cast<int>(0x80808080u));
      q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(high, bit_c), q, _mm512_set1_epi8(4));
    }
    return q;
  }
}

template <int P>
struct Parity {};

// 4 rows x RN tokens. acc[P][p][t]: parity P, rows 2p (low half) and 2p + 1 (high half), token
// t; mins[P] lane 4r + t: output (r, t).
template <int B, int G, int RN, bool kPrefetch>
struct SqTile4 {
  static constexpr int kSubs = G / 32;
  const uint8_t* wr[4];
  const BlockQ8_1* xr[RN];
  const SqTokens* tk;
  __m512 acc[2][2][RN];
  __m512 mins[2];
  __m512 dw[2];  // d of rows 2p, 2p + 1 in the two halves
  __m512 mw;     // lane 4r + t: m of row r

  inline void group(int64_t g) {
    const size_t off = static_cast<size_t>(g) * kSqBlockBytes<B, G>;
    int32_t h[4];  // d | m << 16 of each row
    for (int r = 0; r < 4; ++r) std::memcpy(&h[r], wr[r] + off, sizeof h[r]);
    const __m128i v = _mm_setr_epi32(h[0], h[1], h[2], h[3]);
    const __m512 d4 = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtepi32_epi16(v)));
    const __m512 m4 = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtepi32_epi16(_mm_srli_epi32(v, 16))));
    dw[0] = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), d4);
    dw[1] = _mm512_permutexvar_ps(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), d4);
    mw = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), m4);
  }

  template <int P>
  inline void sub(Parity<P>, int64_t g, int k) {
    const int64_t s = g * kSubs + k;
    const size_t off = static_cast<size_t>(g) * kSqBlockBytes<B, G> + kSqHeader + 4 * B * k;
    __m512i u[2];
    for (int p = 0; p < 2; ++p) u[p] = sq_codes2<B>(wr[2 * p] + off, wr[2 * p + 1] + off);
    for (int t = 0; t < RN; ++t) {
      const __m512i y2 = _mm512_broadcast_i64x4(load32(xr[t][s].qs));
      const __m512 dx = _mm512_set1_ps(tk[s].dx[t]);
      for (int p = 0; p < 2; ++p) {
        acc[P][p][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw[p], dx), dot_lanes(u[p], y2), acc[P][p][t]);
      }
    }
    mins[P] = _mm512_add_ps(mins[P], _mm512_mul_ps(mw, _mm512_broadcast_f32x4(_mm_loadu_ps(tk[s].sx))));
  }

  inline void run(int64_t n_groups, const uint8_t* w, size_t ws, const uint8_t* x, size_t xs,
                  const SqTokens* tokens, float* y, int64_t ys) {
    for (int r = 0; r < 4; ++r) wr[r] = w + r * ws;
    for (int t = 0; t < RN; ++t) xr[t] = reinterpret_cast<const BlockQ8_1*>(x + t * xs);
    tk = tokens;
    for (int par = 0; par < 2; ++par) {
      mins[par] = _mm512_setzero_ps();
      for (int p = 0; p < 2; ++p) {
        for (int t = 0; t < RN; ++t) acc[par][p][t] = _mm512_setzero_ps();
      }
    }
    const TilePrefetch prefetch(w, 4 * ws, n_groups);
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
    alignas(64) float m[16];
    _mm512_store_ps(m, _mm512_add_ps(mins[0], mins[1]));
    for (int p = 0; p < 2; ++p) {
      for (int t = 0; t < RN; ++t) {
        const __m512 a = _mm512_add_ps(acc[0][p][t], acc[1][p][t]);
        y[t * ys + 2 * p] = hsum_lo(a) + m[4 * (2 * p) + t];
        y[t * ys + 2 * p + 1] = hsum_hi(a) + m[4 * (2 * p + 1) + t];
      }
    }
  }
};

template <int B, int G, int RN, bool kPrefetch>
inline void sq_rows4(int64_t n_groups, const uint8_t* w, size_t ws, int64_t r_end,
                     const uint8_t* x, size_t xs, const SqTokens* tk, float* y, int64_t ys) {
  for (int64_t r = 0; r < r_end; r += 4) {
    SqTile4<B, G, RN, kPrefetch>().run(n_groups, w + r * ws, ws, x, xs, tk, y + r, ys);
  }
}

template <int B, int G>
void gemm_sq(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
             int64_t n_tokens, float* y, int64_t ys) {
  constexpr DType kType = static_cast<DType>(static_cast<uint32_t>(DType::SQ2_G32) + 3 * (B - 2) +
                                             (G == 32 ? 0 : G == 64 ? 1 : 2));
  const int64_t n_groups = n / G;
  const int64_t nsub = n / kBlock32;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  const int64_t r_end = n_rows / 4 * 4;
  if (r_end > 0) {
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
          case 1: sq_rows4<B, G, 1, true>(n_groups, wb, ws, r_end, xt, xs, tk, yt, ys); break;
          case 2: sq_rows4<B, G, 2, true>(n_groups, wb, ws, r_end, xt, xs, tk, yt, ys); break;
          default: sq_rows4<B, G, 3, true>(n_groups, wb, ws, r_end, xt, xs, tk, yt, ys); break;
        }
      } else {
        switch (rn) {
          case 1: sq_rows4<B, G, 1, false>(n_groups, wb, ws, r_end, xt, xs, tk, yt, ys); break;
          case 2: sq_rows4<B, G, 2, false>(n_groups, wb, ws, r_end, xt, xs, tk, yt, ys); break;
          case 3: sq_rows4<B, G, 3, false>(n_groups, wb, ws, r_end, xt, xs, tk, yt, ys); break;
          default: sq_rows4<B, G, 4, false>(n_groups, wb, ws, r_end, xt, xs, tk, yt, ys); break;
        }
      }
    }
  }
  // Rows left over: the AVX2 kernel (same order).
  if (r_end < n_rows) {
    avx2::sq_gemm(kType)(n, wb + r_end * ws, ws, n_rows - r_end, x, xs, n_tokens, y + r_end, ys);
  }
}

}  // namespace

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

}  // namespace squeeze::formats::avx512
