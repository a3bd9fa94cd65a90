// Activation thresholding for activation sparsity: zero the small entries of one token's
// activations and list the others, the input the sparse products (ops/sparse_gemv.h) take.
#pragma once

#include <cstdint>

#include "core/cpu.h"

namespace squeeze::ops {

// Zeroes x[i] with |x[i]| < t (NaN is kept), writes the indices of the kept entries to idx
// (ascending) and returns their count. The plain version picks its twin by active_isa(); both
// give identical results.
int64_t threshold_indices(float* x, int64_t n, float t, int32_t* idx);
int64_t threshold_indices_scalar(float* x, int64_t n, float t, int32_t* idx);
int64_t threshold_indices_avx2(float* x, int64_t n, float t, int32_t* idx);

}  // namespace squeeze::ops
