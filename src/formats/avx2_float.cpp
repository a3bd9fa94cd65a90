// AVX2/F16C kernels of the float formats F32, F16, BF16. Conversions are bit-identical to the
// scalar ones (core/fp16.h); dot products accumulate in 4 x 8 float lanes with FMA.
#include "formats/avx2_util.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx2 {
namespace {

// The 8 halves of 8 floats. F16C rounds to nearest even like the scalar code, but keeps NaN
// payloads; the scalar code turns every NaN into 0x7E00 (with its sign), so patch those lanes.
inline __m128i floats_to_halves(__m256 v) {
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  if (!_mm256_testz_ps(nan, nan)) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i quiet =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x8000)),
                        _mm256_set1_epi32(0x7E00));
    const __m256i mask = _mm256_castps_si256(nan);
    const __m128i quiet16 =
        _mm_packus_epi32(_mm256_castsi256_si128(quiet), _mm256_extracti128_si256(quiet, 1));
    const __m128i mask16 =
        _mm_packs_epi32(_mm256_castsi256_si128(mask), _mm256_extracti128_si256(mask, 1));
    h = _mm_blendv_epi8(h, quiet16, mask16);
  }
  return h;
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// 8 bfloat16 -> 8 floats.
inline __m256 load_bf16(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Float -> bfloat16, round to nearest even, NaN -> quiet NaN (as core/fp16.h's f32_to_bf16).
inline __m128i floats_to_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nan_value = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i r = _mm256_blendv_epi8(rounded, nan_value, nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

// sum(a[i] * b[i]) with loaders turning 8 elements into 8 floats.
template <typename T, __m256 (*load)(const T*), float (*scalar)(T)>
float dot(int64_t n, const T* a, const T* b) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps();
  __m256 acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(load(a + i), load(b + i), acc0);
    acc1 = _mm256_fmadd_ps(load(a + i + 8), load(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(load(a + i + 16), load(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(load(a + i + 24), load(b + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load(a + i), load(b + i), acc0);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) sum += scalar(a[i]) * scalar(b[i]);
  return sum;
}

inline __m256 load_f32(const float* p) { return _mm256_loadu_ps(p); }
inline float identity(float f) { return f; }

}  // namespace

float vec_dot_f32(int64_t n, const void* w, const void* x) {
  return dot<float, load_f32, identity>(n, static_cast<const float*>(w),
                                        static_cast<const float*>(x));
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16(h + i));
  for (; i < n; ++i) dst[i] = half_to_float(h[i]);
}

void quantize_f16(const float* src, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), floats_to_halves(_mm256_loadu_ps(src + i)));
  }
  for (; i < n; ++i) {
    uint16_t lanes[8];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lanes), floats_to_halves(_mm256_set1_ps(src[i])));
    h[i] = lanes[0];
  }
}

float vec_dot_f16(int64_t n, const void* w, const void* x) {
  return dot<uint16_t, load_f16, half_to_float>(n, static_cast<const uint16_t*>(w),
                                                static_cast<const uint16_t*>(x));
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_bf16(h + i));
  for (; i < n; ++i) dst[i] = bf16_to_float(h[i]);
}

void quantize_bf16(const float* src, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), floats_to_bf16(_mm256_loadu_ps(src + i)));
  }
  for (; i < n; ++i) {
    uint16_t lanes[8];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lanes), floats_to_bf16(_mm256_set1_ps(src[i])));
    h[i] = lanes[0];
  }
}

float vec_dot_bf16(int64_t n, const void* w, const void* x) {
  return dot<uint16_t, load_bf16, bf16_to_float>(n, static_cast<const uint16_t*>(w),
                                                 static_cast<const uint16_t*>(x));
}

}  // namespace squeeze::formats::avx2
