// AVX2 twin of threshold_indices_scalar (ops/threshold.h): 8 entries per compare; the kept
// ones' indices come from the compare mask through a table (pack_indices.h), without a branch
// per index. Writing 8 indices at idx + k stays within idx[0..n): k <= i and i + 8 <= n.
#include <immintrin.h>

#include "ops/pack_indices.h"
#include "ops/threshold.h"

namespace squeeze::ops {

int64_t threshold_indices_avx2(float* x, int64_t n, float t, int32_t* idx) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 tv = _mm256_set1_ps(t);
  int64_t k = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    // Kept: !(|x| < t), so NaN is kept as in the scalar code.
    const __m256 keep = _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), tv, _CMP_NLT_UQ);
    _mm256_storeu_ps(x + i, _mm256_and_ps(v, keep));
    k += pack_indices8(static_cast<unsigned>(_mm256_movemask_ps(keep)),
                       static_cast<int32_t>(i), idx + k);
  }
  for (; i < n; ++i) {
    if (__builtin_fabsf(x[i]) < t) {
      x[i] = 0.0f;
    } else {
      idx[k++] = static_cast<int32_t>(i);
    }
  }
  return k;
}

}  // namespace squeeze::ops
