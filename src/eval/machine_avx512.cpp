// AVX-512 inner loops of the machine probe. Compiled with SQUEEZE_AVX512_FLAGS; called only
// after cpu_has_avx512(). Intrinsics alone (see machine_avx2.cpp).
#include <immintrin.h>

#include "eval/machine_kernels.h"

namespace squeeze::eval::detail {

float fma_loop_avx512(int64_t iters, float x) {
  // 12 independent chains cover the FMA latency (4 cycles) x 2 pipes.
  const __m512 mul = _mm512_set1_ps(0.999999f);
  const __m512 add = _mm512_set1_ps(1e-7f);
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(x + 0.001f * static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_fmadd_ps(acc[j], mul, add);
  }
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

int32_t vnni_loop(int64_t iters, int32_t x) {
  const __m512i u = _mm512_set1_epi8(3);
  const __m512i v = _mm512_set1_epi8(-2);
  __m512i acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_epi32(x + j);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], u, v);
  }
  __m512i s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_epi32(s, acc[j]);
  return _mm512_reduce_add_epi32(s);
}

}  // namespace squeeze::eval::detail
