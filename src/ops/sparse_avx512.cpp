// AVX-512 twins of the sparse products in sparse_scalar.cpp (the loops: sparse_simd.h), for
// CPUs of the Avx512 tier (core/cpu.h). Twice the lanes of the AVX2 version, and a cheaper
// Q4 decode: vpermps looks a code up by the low 4 bits of its lane, so the low nibble needs no
// mask. On the machine this was written on (AMD Zen 5, 2 threads) the AVX2 version was bound
// by decoding rather than by memory (docs/FORMATS.md, "Column-major layouts").
#include <immintrin.h>

#include <cstdint>

#include "ops/sparse_gemv.h"

namespace squeeze::ops {

namespace {

// 16 floats; 32 rows are 2 vectors.
struct Avx512 {
  using Vec = __m512;
  static constexpr int kLanes = 16;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec set1(float v) { return _mm512_set1_ps(v); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec halves(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }

  struct F16Codes {
    static constexpr int64_t kStepBytes = 64;
    static void load(const uint8_t* col, int64_t r, Vec v[2]) {
      const uint16_t* p = reinterpret_cast<const uint16_t*>(col) + r;
      v[0] = halves(p);
      v[1] = halves(p + 16);
    }
  };

  struct Q8Codes {
    static constexpr int64_t kStepBytes = 32;
    static void load(const uint8_t* col, int64_t r, Vec v[2]) {
      const uint8_t* p = col + r;
      for (int k = 0; k < 2; ++k) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
        v[k] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
      }
    }
  };
};

// Integer traits of q4_subtile (sparse_simd.h) on zmm (4 lanes of 16 bytes), ymm (2), xmm (1);
// dot is VNNI's vpdpbusd.
template <int W>
struct IntW;

template <>
struct IntW<4> {
  using I = __m512i;
  using F = __m512;
  using Acc = __m512i;
  static I load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I unpacklo8(I a, I b) { return _mm512_unpacklo_epi8(a, b); }
  static I unpackhi8(I a, I b) { return _mm512_unpackhi_epi8(a, b); }
  static I unpacklo16(I a, I b) { return _mm512_unpacklo_epi16(a, b); }
  static I unpackhi16(I a, I b) { return _mm512_unpackhi_epi16(a, b); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I srli16_4(I a) { return _mm512_srli_epi16(a, 4); }
  static I set1_8(char v) { return _mm512_set1_epi8(v); }
  static I set1_32(int32_t v) { return _mm512_set1_epi32(v); }
  static Acc acc_zero() { return _mm512_setzero_si512(); }
  static Acc dot(Acc acc, I u, I x) { return _mm512_dpbusd_epi32(acc, u, x); }
  static I to_i32(Acc a) { return a; }
  static I sub32(I a, I b) { return _mm512_sub_epi32(a, b); }
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  static F halves(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F addf(F a, F b) { return _mm512_add_ps(a, b); }
  static F mulf(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmaddf(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F set1f(float v) { return _mm512_set1_ps(v); }
};

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
  static Acc dot(Acc acc, I u, I x) { return _mm256_dpbusd_epi32(acc, u, x); }
  static I to_i32(Acc a) { return a; }
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
  static Acc dot(Acc acc, I u, I x) { return _mm_dpbusd_epi32(acc, u, x); }
  static I to_i32(Acc a) { return a; }
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

// A whole tile per vector: zmm for 128 rows, ymm for 64, xmm for 32.
struct Q4Avx512 {
  template <int G>
  static void tile(const uint8_t* cols, size_t cb, const SparseQuad* q, int64_t nq, int64_t t,
                   const Q4Fold& f, float* y) {
    q4_subtile<IntW<G>, G>(cols, cb, q, nq, t, 0, f, y);
  }
};

}  // namespace
}  // namespace squeeze::ops

namespace squeeze::ops {

void sparse_gemv_avx512(const ColumnWeights& w, const SparseInput& in, int64_t k0, int64_t k1,
                        int64_t r0, int64_t r1, float* y, float* scratch) {
  sparse_gemv_simd<Avx512, Q4Avx512>(w, in, k0, k1, r0, r1, y, scratch);
}

}  // namespace squeeze::ops
