// Internal: scalar twins of the float arithmetic llama.cpp's CPU back end performs in attention
// and activations, operation for operation, so squeeze's activations equal llama.cpp's bit
// for bit (see formats/lanes.h for why that matters with 8-bit activations).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/fp16.h"

namespace squeeze::ops {

// exp(x) by the vectorised single-precision algorithm ggml uses on x86 (ggml_v_expf, after
// ARM's optimized-routines): x = n ln2 + r with n = round(x / ln2) via the 1.5*2^23 shift,
// a degree-5 polynomial for 2^(r/ln2) - 1, scaled by 2^n through the exponent bits, with
// separate scaling where |n| > 126 to avoid overflow in 2^n.
inline float expf_ggml(float x) {
  const float shift = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, shift);  // x / ln2 + shift
  const float n = z - shift;                            // round(x / ln2)
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));  // reduced arg
  const uint32_t e = f32_to_bits(z) << 23;
  const float k = bits_to_f32(e + f32_to_bits(1.0f));  // 2^n
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);  // 2^(b/ln2) - 1
  if (!(std::fabs(n) > 126.0f)) return std::fma(j, k, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = bits_to_f32(g + 0x7f000000u);
  const float s2 = bits_to_f32(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

// silu(x) = x / (1 + exp(-x)) as ggml_v_silu.
inline float silu_ggml(float x) { return x / (1.0f + expf_ggml(0.0f - x)); }

// Sum of 8 lanes in the order of an AVX2 "add halves, movehl, movehdup" reduction (tinyBLAS's
// and the softmax's hsum): ((v0+v4) + (v2+v6)) + ((v1+v5) + (v3+v7)).
inline float hsum8_movehl(const float* v) {
  const float t0 = v[0] + v[4], t1 = v[1] + v[5], t2 = v[2] + v[6], t3 = v[3] + v[7];
  return (t0 + t2) + (t1 + t3);
}

}  // namespace squeeze::ops
