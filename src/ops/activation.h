// Activation functions of the MLP blocks.
#pragma once

#include <cstdint>

namespace squeeze::ops {

// out[i] = silu(gate[i]) * up[i], as ggml computes it (silu by its exp approximation). The
// kernels (swiglu_ggml, swiglu_avx2 in pv.h) share their exp with the attention softmax and
// sit in the same per-ISA kernel table.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace squeeze::ops
