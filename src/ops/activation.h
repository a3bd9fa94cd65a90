// Activation functions of the MLP blocks.
#pragma once

#include <cstdint>

namespace squeeze::ops {

// out[i] = silu(gate[i]) * up[i], as ggml computes it (silu by its exp approximation). The
// kernels (swiglu_ggml, swiglu_avx2 in pv.h) share their exp with the attention softmax and
// sit in the same per-ISA kernel table.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// out[i] = gelu(gate[i]) * up[i] with the tanh approximation of GELU, as ggml's CPU back end
// computes it: gate rounded to half, GELU of that looked up in a table of half results (gate
// <= -10: 0; gate >= 10: gate itself).
void geglu(const float* gate, const float* up, int64_t n, float* out);
// The tanh approximation of GELU in float, ggml's formula.
float gelu_tanh(float x);

}  // namespace squeeze::ops
