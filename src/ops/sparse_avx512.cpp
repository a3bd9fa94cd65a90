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

  // The 16 bytes of a row group widened to 16 lanes: lane k holds row k in bits 0-3 and row
  // 16 + k in bits 4-7.
  struct Q4Codes {
    static constexpr int64_t kStepBytes = 16;
    static void load(const uint8_t* col, int64_t r, Vec v[2]) {
      const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
      const __m512i b =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(col + r / 2)));
      v[0] = _mm512_permutexvar_ps(b, codes);                   // rows 0..15
      v[1] = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));       // rows 16..31
    }
  };
};

}  // namespace

}  // namespace squeeze::ops

#include "ops/sparse_simd.h"

namespace squeeze::ops {

void sparse_gemv_avx512(const ColumnWeights& w, const float* x, const int32_t* idx,
                        int64_t n_active, int64_t r0, int64_t r1, float* y, float* scratch) {
  sparse_gemv_simd<Avx512>(w, x, idx, n_active, r0, r1, y, scratch);
}

}  // namespace squeeze::ops
