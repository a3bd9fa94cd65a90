// AVX2 twins of the sparse products in sparse_scalar.cpp: the same sums in the same order, with
// fused multiply-adds (the loops: sparse_simd.h). Compiled with AVX2/FMA/F16C flags; called
// only when the CPU has them (core/cpu.h).
#include <immintrin.h>

#include <cstdint>

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

  // Byte k of a row group holds row k (low nibble) and row 16 + k (high nibble): one vpmovzxbd
  // of 8 bytes, then an and and a shift give 8 rows each.
  struct Q4Codes {
    static constexpr int64_t kStepBytes = 16;
    static void load(const uint8_t* col, int64_t r, Vec v[4]) {
      const uint8_t* p = col + r / 2;
      const __m256i low = _mm256_set1_epi32(0xF);
      for (int h = 0; h < 2; ++h) {
        const __m256i b =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * h)));
        v[h] = _mm256_cvtepi32_ps(_mm256_and_si256(b, low));      // rows 8h .. 8h + 7
        v[2 + h] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));   // rows 16 + 8h ..
      }
    }
  };
};

}  // namespace

}  // namespace squeeze::ops

#include "ops/sparse_simd.h"

namespace squeeze::ops {

void sparse_gemv_avx2(const ColumnWeights& w, const float* x, const int32_t* idx,
                      int64_t n_active, int64_t r0, int64_t r1, float* y, float* scratch) {
  sparse_gemv_simd<Avx2>(w, x, idx, n_active, r0, r1, y, scratch);
}

int64_t nonzero_indices_avx2(const float* x, int64_t n, int32_t* idx) {
  int64_t k = 0, i = 0;
  const __m256 zero = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    // Lanes that are not zero (unordered: a NaN is kept, as x != 0 keeps it).
    unsigned mask = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), zero, _CMP_NEQ_UQ)));
    while (mask != 0) {
      idx[k++] = static_cast<int32_t>(i + __builtin_ctz(mask));
      mask &= mask - 1;
    }
  }
  for (; i < n; ++i) {
    if (x[i] != 0.0f) idx[k++] = static_cast<int32_t>(i);
  }
  return k;
}

}  // namespace squeeze::ops
