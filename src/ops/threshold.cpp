#include "ops/threshold.h"

#include <cmath>

namespace squeeze::ops {

int64_t threshold_indices_scalar(float* x, int64_t n, float t, int32_t* idx) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::fabs(x[i]) < t) {
      x[i] = 0.0f;
    } else {
      idx[k++] = static_cast<int32_t>(i);
    }
  }
  return k;
}

int64_t threshold_indices(float* x, int64_t n, float t, int32_t* idx) {
  static const bool avx2 = uses_avx2(active_isa());
  return avx2 ? threshold_indices_avx2(x, n, t, idx) : threshold_indices_scalar(x, n, t, idx);
}

}  // namespace squeeze::ops
