// AVX2 kernels of the 8-bit formats Q8_0, Q8_1, Q8_K. The quantizers produce the same bytes
// as the scalar reference (scalar_q8.cpp): same scale arithmetic, same rounding per element.
#include "formats/avx2_util.h"
#include "formats/blocks.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx2 {
namespace {

inline uint16_t float_to_half(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

// Quantizes one block of 32 as llama.cpp's x86 quantize_row_q8_0/q8_1: d = amax / 127,
// q = round-half-even(x * (127 / amax)). Returns d; *sum gets the sum of the codes.
inline float quantize_block32(const float* x, int8_t* qs, int32_t* sum) {
  const __m256 v0 = _mm256_loadu_ps(x);
  const __m256 v1 = _mm256_loadu_ps(x + 8);
  const __m256 v2 = _mm256_loadu_ps(x + 16);
  const __m256 v3 = _mm256_loadu_ps(x + 24);
  const __m256 m =
      _mm256_max_ps(_mm256_max_ps(abs_ps(v0), abs_ps(v1)), _mm256_max_ps(abs_ps(v2), abs_ps(v3)));
  const float amax = hmax(m);
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const __m256 mul = _mm256_set1_ps(id);
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256i q0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), kNearest));
  const __m256i q1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), kNearest));
  const __m256i q2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), kNearest));
  const __m256i q3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), kNearest));
  store_i8x32(qs, q0, q1, q2, q3);
  *sum = hsum(_mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3)));
  return amax / 127.0f;
}

// dst[0..32) = d * qs[0..32).
inline void dequantize_block32(const int8_t* qs, float d, float* dst) {
  const __m256 vd = _mm256_set1_ps(d);
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(dst + 8 * c, _mm256_mul_ps(i8x8_to_ps(qs + 8 * c), vd));
  }
}

}  // namespace

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  BlockQ8_0* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    int32_t sum;
    y[i].d = float_to_half(quantize_block32(src + i * kBlock32, y[i].qs, &sum));
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    dequantize_block32(x[i].qs, half_to_float(x[i].d), dst + i * kBlock32);
  }
}

// One accumulator, block by block: llama.cpp's order (see lanes.h for why it matters).
float vec_dot_q8_0(int64_t n, const void* w, const void* x) {
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(a[i].d) * half_to_float(b[i].d));
    const __m256i p = dot_i8_i8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs)),
                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs)));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum(acc);
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  BlockQ8_1* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    int32_t sum;
    const float d = quantize_block32(src + i * kBlock32, y[i].qs, &sum);
    y[i].d = float_to_half(d);
    y[i].s = float_to_half(d * static_cast<float>(sum));
  }
}

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
  const BlockQ8_1* x = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    dequantize_block32(x[i].qs, half_to_float(x[i].d), dst + i * kBlock32);
  }
}

// As ggml's quantize_row_q8_K_ref: the first value of largest magnitude maps to -127,
// codes round half to even, d = 1 / iscale.
void quantize_q8_k(const float* src, void* dst, int64_t n) {
  BlockQ8_K* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    const float* x = src + i * kSuperBlock;
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < kSuperBlock; k += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + k)));
    const float amax = hmax(m);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    float max = 0.0f;
    for (int k = 0; k < kSuperBlock; k += 8) {
      const __m256 hit =
          _mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + k)), _mm256_set1_ps(amax), _CMP_EQ_OQ);
      const int mask = _mm256_movemask_ps(hit);
      if (mask != 0) {
        max = x[k + __builtin_ctz(static_cast<unsigned>(mask))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 mul = _mm256_set1_ps(iscale);
    const __m256i limit = _mm256_set1_epi32(127);
    for (int g = 0; g < kSuperBlock; g += 32) {
      __m256i q[4];
      for (int c = 0; c < 4; ++c) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + g + 8 * c), mul);
        const __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[c] = _mm256_min_epi32(_mm256_cvtps_epi32(r), limit);
      }
      store_i8x32(y[i].qs + g, q[0], q[1], q[2], q[3]);
      y[i].bsums[g / 16] = static_cast<int16_t>(hsum(_mm256_add_epi32(q[0], q[1])));
      y[i].bsums[g / 16 + 1] = static_cast<int16_t>(hsum(_mm256_add_epi32(q[2], q[3])));
    }
    y[i].d = 1.0f / iscale;
  }
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
  const BlockQ8_K* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    for (int k = 0; k < kSuperBlock; k += kBlock32) {
      dequantize_block32(x[i].qs + k, x[i].d, dst + i * kSuperBlock + k);
    }
  }
}

}  // namespace squeeze::formats::avx2
