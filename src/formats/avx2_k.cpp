// AVX2 kernels of Q4_K and Q6_K: decoding (bit-identical to scalar_k.cpp) and dot products with
// Q8_K activations. Per super-block the integer sum is exact (maddubs on unsigned codes, madd
// with the sub-block scales), then scaled once, as ggml's x86 kernels do.
#include "formats/avx2_util.h"
#include "formats/blocks.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx2 {
namespace {

inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

void unpack_scales_q4_k(const BlockQ4_K& b, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 8; ++j) q4k_scale_min(j, b.scales, &sc[j], &m[j]);
}

// The 128 codes of half h of a Q6_K block as four vectors of 32 unsigned bytes in [0, 63]:
// q[k] holds elements 128h + 32k .. 128h + 32k + 31.
inline void q6_k_codes(const BlockQ6_K& b, int h, __m256i* q) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i two = _mm256_set1_epi8(3);
  const __m256i ql0 = load32(b.ql + 64 * h);
  const __m256i ql1 = load32(b.ql + 64 * h + 32);
  const __m256i qh = load32(b.qh + 32 * h);
  // Shifts are on 16-bit lanes; the masks keep each byte's own bits.
  const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(qh, two), 4);
  const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), two), 4);
  const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), two), 4);
  const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), two), 4);
  q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), h0);
  q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), h1);
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), h2);
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), h3);
}

}  // namespace

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(src);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    const float d = half_to_float(x[i].d);
    const float dmin = half_to_float(x[i].dmin);
    uint8_t sc[8], m[8];
    unpack_scales_q4_k(x[i], sc, m);
    float* y = dst + i * kSuperBlock;
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = load32(x[i].qs + 32 * c);
      const __m256i codes[2] = {_mm256_and_si256(raw, low4),
                                _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4)};
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * c + half;  // sub-block
        const __m256 dj = _mm256_set1_ps(d * sc[j]);
        const __m256 mj = _mm256_set1_ps(dmin * m[j]);
        for (int k = 0; k < 4; ++k) {
          const __m256 q = i8_chunk_to_ps(codes[half], k);
          _mm256_storeu_ps(y + 32 * j + 8 * k, _mm256_sub_ps(_mm256_mul_ps(dj, q), mj));
        }
      }
    }
  }
}

float vec_dot_q4_k(int64_t n, const void* w, const void* x) {
  const BlockQ4_K* a = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    uint8_t sc[8], m[8];
    unpack_scales_q4_k(a[i], sc, m);
    int32_t summ = 0;
    for (int j = 0; j < 8; ++j) summ += m[j] * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);

    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = load32(a[i].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(raw, low4);                        // sub-block 2c
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);  // sub-block 2c+1
      const __m256i p_lo = _mm256_maddubs_epi16(lo, load32(b[i].qs + 64 * c));
      const __m256i p_hi = _mm256_maddubs_epi16(hi, load32(b[i].qs + 64 * c + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p_lo, _mm256_set1_epi16(sc[2 * c])));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p_hi, _mm256_set1_epi16(sc[2 * c + 1])));
    }
    const float d = half_to_float(a[i].d) * b[i].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    mins += (half_to_float(a[i].dmin) * b[i].d) * static_cast<float>(summ);
  }
  return hsum(acc) - mins;
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(src);
  const __m256i offset = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    const float d = half_to_float(x[i].d);
    float* y = dst + i * kSuperBlock;
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      q6_k_codes(x[i], h, q);
      for (int k = 0; k < 4; ++k) {
        const __m256i signed_q = _mm256_sub_epi8(q[k], offset);
        const int j = 8 * h + 2 * k;  // first of the two sub-blocks of 16 in this vector
        const __m256 d0 = _mm256_set1_ps(d * x[i].scales[j]);
        const __m256 d1 = _mm256_set1_ps(d * x[i].scales[j + 1]);
        float* out = y + 128 * h + 32 * k;
        _mm256_storeu_ps(out, _mm256_mul_ps(d0, i8_chunk_to_ps(signed_q, 0)));
        _mm256_storeu_ps(out + 8, _mm256_mul_ps(d0, i8_chunk_to_ps(signed_q, 1)));
        _mm256_storeu_ps(out + 16, _mm256_mul_ps(d1, i8_chunk_to_ps(signed_q, 2)));
        _mm256_storeu_ps(out + 24, _mm256_mul_ps(d1, i8_chunk_to_ps(signed_q, 3)));
      }
    }
  }
}

// sum_j scale_j * sum((q - 32) * q8) per super-block; (q - 32) * q8 is computed as
// maddubs(q, q8) - maddubs(32, q8) so the unsigned operand of maddubs stays unsigned.
float vec_dot_q6_k(int64_t n, const void* w, const void* x) {
  const BlockQ6_K* a = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  const __m256i offset = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      q6_k_codes(a[i], h, q);
      for (int k = 0; k < 4; ++k) {
        const __m256i q8 = load32(b[i].qs + 128 * h + 32 * k);
        const __m256i p =
            _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], q8), _mm256_maddubs_epi16(offset, q8));
        const int j = 8 * h + 2 * k;
        const __m256i scale =
            _mm256_set_m128i(_mm_set1_epi16(a[i].scales[j + 1]), _mm_set1_epi16(a[i].scales[j]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale));
      }
    }
    const float d = half_to_float(a[i].d) * b[i].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum(acc);
}

}  // namespace squeeze::formats::avx2
