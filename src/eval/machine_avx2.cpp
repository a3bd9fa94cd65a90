// AVX2 inner loops of the machine probe. Compiled with SQUEEZE_AVX2_FLAGS; called only after
// cpu_has_avx2(). Uses intrinsics alone (no inline functions from other headers, so no
// AVX2-compiled copy of a shared inline function can leak into scalar callers).
#include <immintrin.h>

#include "eval/machine_kernels.h"

namespace squeeze::eval::detail {

uint64_t stream_read_avx2(const uint64_t* words, size_t n) {
  // Four independent 256-bit loads per step, folded with integer adds (1-cycle latency):
  // the loop is bound by the loads, i.e. by the memory system.
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += kReadBlockWords) {
    const auto* p = reinterpret_cast<const __m256i*>(words + i);
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(p + 0));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(p + 1));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(p + 2));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(p + 3));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

float fma_loop_avx2(int64_t iters, float x) {
  // 12 independent chains: enough to cover FMA latency (4-5 cycles) x 2 FMA pipes.
  const __m256 mul = _mm256_set1_ps(0.999999f);
  const __m256 add = _mm256_set1_ps(1e-7f);
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(x + 0.001f * static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i) {
    acc[0] = _mm256_fmadd_ps(acc[0], mul, add);
    acc[1] = _mm256_fmadd_ps(acc[1], mul, add);
    acc[2] = _mm256_fmadd_ps(acc[2], mul, add);
    acc[3] = _mm256_fmadd_ps(acc[3], mul, add);
    acc[4] = _mm256_fmadd_ps(acc[4], mul, add);
    acc[5] = _mm256_fmadd_ps(acc[5], mul, add);
    acc[6] = _mm256_fmadd_ps(acc[6], mul, add);
    acc[7] = _mm256_fmadd_ps(acc[7], mul, add);
    acc[8] = _mm256_fmadd_ps(acc[8], mul, add);
    acc[9] = _mm256_fmadd_ps(acc[9], mul, add);
    acc[10] = _mm256_fmadd_ps(acc[10], mul, add);
    acc[11] = _mm256_fmadd_ps(acc[11], mul, add);
  }
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}

}  // namespace squeeze::eval::detail
