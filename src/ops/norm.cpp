#include "ops/norm.h"

#include <cmath>

namespace squeeze::ops {

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  // Squares in float, summed in double, as ggml's rms_norm does (its ggml_float accumulator).
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

}  // namespace squeeze::ops
