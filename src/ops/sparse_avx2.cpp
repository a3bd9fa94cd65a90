// AVX2 twins of the sparse products in sparse_scalar.cpp: the same sums in the same order, with
// fused multiply-adds (the loops: sparse_simd.h). Compiled with AVX2/FMA/F16C flags; called
// only when the CPU has them (core/cpu.h).
#include <immintrin.h>

#include <cstdint>

#include "ops/pack_indices.h"
#include "ops/sparse_gemv.h"

namespace squeeze::ops {

namespace {

// 8 floats; 32 rows are 4 vectors.
struct Avx2 {
  using Vec = __m256;
  static constexpr int kLanes = 8;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec set1(float v) { return _mm256_set1_ps(v); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec halves(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }

  struct F16Codes {
    static constexpr int64_t kStepBytes = 64;
    static void load(const uint8_t* col, int64_t r, Vec v[4]) {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(col) + r;
      for (int k = 0; k < 4; ++k) v[k] = halves(p + 8 * k);
    }
  };

  // One vpmovsxbd per 8 rows.
  struct Q8Codes {
    static constexpr int64_t kStepBytes = 32;
    static void load(const uint8_t* col, int64_t r, Vec v[4]) {
      const uint8_t* p = col + r;
      for (int k = 0; k < 4; ++k) {
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * k));
        v[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
      }
    }
  };
};

// Integer traits of q4_subtile (sparse_simd.h) on ymm (2 lanes of 16 bytes) and xmm (1): dot
// is vpmaddubsw (u8 codes x s8 xq, pairs summed: at most 2 * 15 * 127 = 3810), added in 16 bits
// over the block (at most 8 quads: 30480 < 32767), widened by vpmaddwd with ones at the fold.
template <int W>
struct IntW;

template <>
struct IntW<2> {
  using I = __m256i;
  using F = __m256;
  using Acc = __m256i;
  static I load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const I*>(p)); }
  static I unpacklo8(I a, I b) { return _mm256_unpacklo_epi8(a, b); }
  static I unpackhi8(I a, I b) { return _mm256_unpackhi_epi8(a, b); }
  static I unpacklo16(I a, I b) { return _mm256_unpacklo_epi16(a, b); }
  static I unpackhi16(I a, I b) { return _mm256_unpackhi_epi16(a, b); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I srli16_4(I a) { return _mm256_srli_epi16(a, 4); }
  static I set1_8(char v) { return _mm256_set1_epi8(v); }
  static I set1_32(int32_t v) { return _mm256_set1_epi32(v); }
  static Acc acc_zero() { return _mm256_setzero_si256(); }
  static Acc dot(Acc acc, I u, I x) { return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, x)); }
  static I to_i32(Acc a) { return _mm256_madd_epi16(a, _mm256_set1_epi16(1)); }
  static I sub32(I a, I b) { return _mm256_sub_epi32(a, b); }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static F halves(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F addf(F a, F b) { return _mm256_add_ps(a, b); }
  static F mulf(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmaddf(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
};

template <>
struct IntW<1> {
  using I = __m128i;
  using F = __m128;
  using Acc = __m128i;
  static I load(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const I*>(p)); }
  static I unpacklo8(I a, I b) { return _mm_unpacklo_epi8(a, b); }
  static I unpackhi8(I a, I b) { return _mm_unpackhi_epi8(a, b); }
  static I unpacklo16(I a, I b) { return _mm_unpacklo_epi16(a, b); }
  static I unpackhi16(I a, I b) { return _mm_unpackhi_epi16(a, b); }
  static I and_(I a, I b) { return _mm_and_si128(a, b); }
  static I srli16_4(I a) { return _mm_srli_epi16(a, 4); }
  static I set1_8(char v) { return _mm_set1_epi8(v); }
  static I set1_32(int32_t v) { return _mm_set1_epi32(v); }
  static Acc acc_zero() { return _mm_setzero_si128(); }
  static Acc dot(Acc acc, I u, I x) { return _mm_add_epi16(acc, _mm_maddubs_epi16(u, x)); }
  static I to_i32(Acc a) { return _mm_madd_epi16(a, _mm_set1_epi16(1)); }
  static I sub32(I a, I b) { return _mm_sub_epi32(a, b); }
  static F cvt(I a) { return _mm_cvtepi32_ps(a); }
  static F halves(const uint16_t* p) {
    return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static F loadf(const float* p) { return _mm_loadu_ps(p); }
  static void storef(float* p, F v) { _mm_storeu_ps(p, v); }
  static F addf(F a, F b) { return _mm_add_ps(a, b); }
  static F mulf(F a, F b) { return _mm_mul_ps(a, b); }
  static F fmaddf(F a, F b, F c) { return _mm_fmadd_ps(a, b, c); }
  static F set1f(float v) { return _mm_set1_ps(v); }
};

}  // namespace

}  // namespace squeeze::ops

#include "ops/sparse_simd.h"

namespace squeeze::ops {
namespace {

// ymm: a 128-row tile in two halves (lanes 0-1, 2-3), a 64-row tile whole; xmm: 32 rows.
struct Q4Avx2 {
  template <int G>
  static void tile(const uint8_t* cols, size_t cb, const SparseQuad* q, int64_t nq, int64_t t,
                   const Q4Fold& f, float* y) {
    if constexpr (G == 1) {
      q4_subtile<IntW<1>, 1>(cols, cb, q, nq, t, 0, f, y);
    } else {
      for (int g0 = 0; g0 < G; g0 += 2) q4_subtile<IntW<2>, G>(cols, cb, q, nq, t, g0, f, y);
    }
  }
};

}  // namespace
}  // namespace squeeze::ops

namespace squeeze::ops {

void sparse_gemv_avx2(const ColumnWeights& w, const SparseInput& in, int64_t k0, int64_t k1,
                      int64_t r0, int64_t r1, float* y, float* scratch) {
  sparse_gemv_simd<Avx2, Q4Avx2>(w, in, k0, k1, r0, r1, y, scratch);
}

int64_t nonzero_indices_avx2(const float* x, int64_t n, int32_t* idx) {
  int64_t k = 0, i = 0;
  const __m256 zero = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    // Lanes that are not zero (unordered: a NaN is kept, as x != 0 keeps it).
    const unsigned mask = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), zero, _CMP_NEQ_UQ)));
    k += pack_indices8(mask, static_cast<int32_t>(i), idx + k);  // within idx[0..n): k <= i
  }
  for (; i < n; ++i) {
    if (x[i] != 0.0f) idx[k++] = static_cast<int32_t>(i);
  }
  return k;
}

bool group_blocks_avx2(const float* x, int64_t n_cols, int64_t n_active, const int8_t* xq,
                       SparseGroups& g) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256i iota = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                        17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
  const __m128i iota16 = _mm256_castsi256_si128(iota);
  int64_t nb = 0, nq = 0, na = 0;
  for (int64_t b = 0; b < n_cols / 32; ++b) {
    // The block's non-zero lanes (a NaN counts, as in nonzero_indices), 8 bits per compare.
    unsigned m[4];
    int n = 0;
    for (int h = 0; h < 4; ++h) {
      m[h] = static_cast<unsigned>(_mm256_movemask_ps(
          _mm256_cmp_ps(_mm256_loadu_ps(x + 32 * b + 8 * h), zero, _CMP_NEQ_UQ)));
      n += kPackTable.count[m[h]];
    }
    if (n == 0) continue;
    if (na + n > n_active) return false;
    g.blocks[nb] = static_cast<int32_t>(b);
    g.first[nb] = static_cast<int32_t>(na);
    g.quad[nb] = static_cast<int32_t>(nq);
    ++nb;
    na += n;
    if (g.quads == nullptr) continue;
    // The active positions j, packed, built in registers (through memory, a 32-byte load of
    // four overlapping 8-byte stores stalled on store forwarding: most of the time here):
    // lo = the positions of mask bytes 0-1, hi = of bytes 2-3 (each table piece zero past its
    // count), hi then moved up by their count.
    const int c0 = kPackTable.count[m[0]], c2 = kPackTable.count[m[2]];
    const int s01 = c0 + kPackTable.count[m[1]];
    auto piece = [&](int h) {
      return _mm_cvtsi64_si128(static_cast<long long>(kPackTable.bytes[h][m[h]]));
    };
    auto shift_up = [&](__m128i v, int c) {  // bytes moved up by c < 16, zeros shifted in
      return _mm_shuffle_epi8(v, _mm_sub_epi8(iota16, _mm_set1_epi8(static_cast<char>(c))));
    };
    const __m128i j_lo = _mm_or_si128(piece(0), shift_up(piece(1), c0));
    const __m128i j_hi = _mm_or_si128(piece(2), shift_up(piece(3), c2));
    // Byte i of the result takes hi[i - s01] where 0 <= i - s01 < 16: a pshufb of hi in both
    // halves, the other indices given bit 7 (negative ones have it) so that they read zero.
    __m256i from_hi = _mm256_sub_epi8(iota, _mm256_set1_epi8(static_cast<char>(s01)));
    from_hi = _mm256_or_si256(from_hi, _mm256_cmpgt_epi8(from_hi, _mm256_set1_epi8(15)));
    const __m256i packed = _mm256_or_si256(
        _mm256_zextsi128_si256(j_lo),
        _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(j_hi), from_hi));
    // Past the n-th: the last position (the block mask's highest bit) again, with a zero code
    // (the scalar twin's padding).
    const unsigned all = m[0] | m[1] << 8 | m[2] << 16 | m[3] << 24;
    const __m256i pad = _mm256_cmpgt_epi8(iota, _mm256_set1_epi8(static_cast<char>(n - 1)));
    const __m256i j = _mm256_blendv_epi8(
        packed, _mm256_set1_epi8(static_cast<char>(31 - __builtin_clz(all))), pad);
    // Their codes: a 32-entry table lookup from two 16-byte lookups (pshufb reads j's low 4
    // bits; j < 32, so no index has bit 7 set).
    const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * b));
    const __m256i lo = _mm256_permute2x128_si256(codes, codes, 0x00);
    const __m256i hi = _mm256_permute2x128_si256(codes, codes, 0x11);
    const __m256i upper = _mm256_cmpgt_epi8(j, _mm256_set1_epi8(15));
    const __m256i xv = _mm256_andnot_si256(
        pad, _mm256_blendv_epi8(_mm256_shuffle_epi8(lo, j), _mm256_shuffle_epi8(hi, j), upper));
    // Quads are {4 positions, 4 codes}: interleaving j and xv by 32-bit lanes within each
    // 128-bit half gives a = quads 0, 1 | 4, 5 and c = quads 2, 3 | 6, 7.
    const __m256i a = _mm256_unpacklo_epi32(j, xv);
    const __m256i c = _mm256_unpackhi_epi32(j, xv);
    auto* out = reinterpret_cast<__m128i*>(g.quads + nq);
    _mm_storeu_si128(out, _mm256_castsi256_si128(a));
    _mm_storeu_si128(out + 1, _mm256_castsi256_si128(c));
    _mm_storeu_si128(out + 2, _mm256_extracti128_si256(a, 1));
    _mm_storeu_si128(out + 3, _mm256_extracti128_si256(c, 1));
    nq += (n + 3) / 4;
  }
  if (na != n_active) return false;
  g.first[nb] = static_cast<int32_t>(na);
  g.quad[nb] = static_cast<int32_t>(nq);
  g.n_blocks = nb;
  g.n_quads = nq;
  return true;
}

}  // namespace squeeze::ops
