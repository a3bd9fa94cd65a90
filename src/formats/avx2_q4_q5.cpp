// AVX2 kernels of Q4_0, Q4_1, Q5_0, Q5_1: decoding (bit-identical to scalar_q4_q5.cpp) and dot
// products with Q8_0 / Q8_1 activations (maddubs int8 products, one FMA per block, as ggml's
// x86 kernels). The hot loops of decode: vec_dot_q4_0 and vec_dot_q4_1 run once per weight row.
#include "formats/avx2_util.h"
#include "formats/blocks.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx2 {
namespace {

inline __m256i load32(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Codes of a block, as 32 int8 in element order.
inline __m256i q4_0_codes(const BlockQ4_0& b) {  // q - 8, in [-8, 7]
  return _mm256_sub_epi8(unpack_nibbles(b.qs), _mm256_set1_epi8(8));
}
inline __m256i q4_1_codes(const BlockQ4_1& b) { return unpack_nibbles(b.qs); }  // [0, 15]
inline __m256i q5_0_codes(const BlockQ5_0& b) { return avx2::q5_0_codes(b.qs, b.qh); }
inline __m256i q5_1_codes(const BlockQ5_1& b) {  // [0, 31]
  const __m256i high = _mm256_and_si256(expand_bits(b.qh), _mm256_set1_epi8(0x10));
  return _mm256_or_si256(unpack_nibbles(b.qs), high);
}

// dst[0..32) = d * q (+ m): multiply, then add, as the scalar code (no FMA: results must match).
inline void store_scaled(__m256i q, float d, float* dst) {
  const __m256 vd = _mm256_set1_ps(d);
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(dst + 8 * c, _mm256_mul_ps(i8_chunk_to_ps(q, c), vd));
  }
}
inline void store_scaled(__m256i q, float d, float m, float* dst) {
  const __m256 vd = _mm256_set1_ps(d);
  const __m256 vm = _mm256_set1_ps(m);
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(dst + 8 * c, _mm256_add_ps(_mm256_mul_ps(i8_chunk_to_ps(q, c), vd), vm));
  }
}

}  // namespace

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    store_scaled(q4_0_codes(x[i]), half_to_float(x[i].d), dst + i * kBlock32);
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  const BlockQ4_1* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    store_scaled(q4_1_codes(x[i]), half_to_float(x[i].d), half_to_float(x[i].m),
                 dst + i * kBlock32);
  }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const BlockQ5_0* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    store_scaled(q5_0_codes(x[i]), half_to_float(x[i].d), dst + i * kBlock32);
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  const BlockQ5_1* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    store_scaled(q5_1_codes(x[i]), half_to_float(x[i].d), half_to_float(x[i].m),
                 dst + i * kBlock32);
  }
}

// Q4_0 x Q8_0: sum_blocks d_w*d_x * sum(q_w * q_x), one accumulator in llama.cpp's order
// (see lanes.h for why the order matters).
float vec_dot_q4_0(int64_t n, const void* w, const void* x) {
  const BlockQ4_0* a = static_cast<const BlockQ4_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(a[i].d) * half_to_float(b[i].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8_i8(q4_0_codes(a[i]), load32(b[i].qs))), acc);
  }
  return hsum(acc);
}

// Q4_0 x Q8_0 in llama.cpp's repacked order (see the scalar twin): the int sum of a block is
// reduced across lanes exactly, then one scalar fused multiply-add per block.
float vec_dot_q4_0_repacked(int64_t n, const void* w, const void* x) {
  const BlockQ4_0* a = static_cast<const BlockQ4_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const int32_t sumi = hsum(dot_i8_i8(q4_0_codes(a[i]), load32(b[i].qs)));
    const float d = half_to_float(a[i].d) * half_to_float(b[i].d);
    acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(static_cast<float>(sumi)), _mm_set_ss(d),
                                     _mm_set_ss(acc)));
  }
  return acc;
}

// Q4_1 x Q8_1: sum_blocks d_w*d_x * sum(q_w * q_x) + m_w * s_x, in llama.cpp's order: the
// first term in one accumulator, the second summed block by block, added at the end.
float vec_dot_q4_1(int64_t n, const void* w, const void* x) {
  const BlockQ4_1* a = static_cast<const BlockQ4_1*>(w);
  const BlockQ8_1* b = static_cast<const BlockQ8_1*>(x);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    mins += half_to_float(a[i].m) * half_to_float(b[i].s);
    const __m256 d = _mm256_set1_ps(half_to_float(a[i].d) * half_to_float(b[i].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8_i8(q4_1_codes(a[i]), load32(b[i].qs))), acc);
  }
  return hsum(acc) + mins;
}

float vec_dot_q5_0(int64_t n, const void* w, const void* x) {
  const BlockQ5_0* a = static_cast<const BlockQ5_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(a[i].d) * half_to_float(b[i].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8_i8(q5_0_codes(a[i]), load32(b[i].qs))), acc);
  }
  return hsum(acc);
}

float vec_dot_q5_1(int64_t n, const void* w, const void* x) {
  const BlockQ5_1* a = static_cast<const BlockQ5_1*>(w);
  const BlockQ8_1* b = static_cast<const BlockQ8_1*>(x);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(a[i].d) * half_to_float(b[i].d));
    mins += half_to_float(a[i].m) * half_to_float(b[i].s);
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8_i8(q5_1_codes(a[i]), load32(b[i].qs))), acc);
  }
  return hsum(acc) + mins;
}

}  // namespace squeeze::formats::avx2
