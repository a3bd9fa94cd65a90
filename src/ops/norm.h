#pragma once

#include <cstdint>

namespace squeeze::ops {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], i < n. out may alias x.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);

}  // namespace squeeze::ops
