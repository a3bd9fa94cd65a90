#include "ops/activation.h"

#include <cmath>
#include <vector>

#include "core/cpu.h"
#include "core/fp16.h"
#include "ops/pv.h"

namespace squeeze::ops {

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  attention_kernels(active_isa()).swiglu(gate, up, n, out);
}

float gelu_tanh(float x) {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  // 1 + a x^2 as one fused multiply-add: ggml_gelu_f32 is compiled with FMA and GCC contracts
  // it so (its table of GELU values, which llama.cpp's geglu reads, comes out so).
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * std::fma(kCoefA * x, x, 1.0f)));
}

void geglu(const float* gate, const float* up, int64_t n, float* out) {
  // GELU of every half value, rounded to half (ggml's ggml_table_gelu_f16).
  static const std::vector<float> table = [] {
    std::vector<float> t(1 << 16);
    for (uint32_t h = 0; h < t.size(); ++h) {
      t[h] = f16_to_f32(f32_to_f16(gelu_tanh(f16_to_f32(static_cast<f16_t>(h)))));
    }
    return t;
  }();
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    if (x <= -10.0f) {
      out[i] = 0.0f;
    } else if (x >= 10.0f) {
      out[i] = x * up[i];
    } else {
      out[i] = table[f32_to_f16(x)] * up[i];
    }
  }
}

}  // namespace squeeze::ops
