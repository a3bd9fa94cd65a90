#include "ops/rope.h"

#include <cmath>
#include <vector>

namespace squeeze::ops {

Rope::Rope(int n_rot, float freq_base, RopeLayout layout, const float* freq_factors)
    : n_rot_(n_rot), freq_base_(freq_base), layout_(layout), freq_factors_(freq_factors) {
  theta_scale_ = std::pow(freq_base_, -2.0f / static_cast<float>(n_rot_));
}

void Rope::angles(int64_t pos, float* cs) const {
  // ggml builds the angle by repeated multiplication in float, starting from the position
  // (theta *= theta_scale); the same running product keeps angles equal to llama.cpp's.
  float theta = static_cast<float>(pos);
  for (int i = 0; i < n_rot_ / 2; ++i, theta *= theta_scale_) {
    const float t = freq_factors_ == nullptr ? theta : theta / freq_factors_[i];
    cs[2 * i] = std::cos(t);
    cs[2 * i + 1] = std::sin(t);
  }
}

void Rope::rotate(float* x, int n_heads, int head_dim, const float* cs) const {
  const int half = n_rot_ / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float c = cs[2 * i];
      const float s = cs[2 * i + 1];
      const int a = layout_ == RopeLayout::Norm ? 2 * i : i;
      const int b = layout_ == RopeLayout::Norm ? 2 * i + 1 : i + half;
      const float x0 = v[a];
      const float x1 = v[b];
      // llama.cpp's build contracts these into fused multiply-adds (x0*c and x0*s unrounded,
      // found by matching its rotated q bit for bit); the same keeps q and k identical to its.
      v[a] = std::fma(x0, c, -(x1 * s));
      v[b] = std::fma(x0, s, x1 * c);
    }
  }
}

void Rope::apply(float* x, int n_heads, int head_dim, int64_t pos) const {
  std::vector<float> cs(static_cast<size_t>(n_rot_));
  angles(pos, cs.data());
  rotate(x, n_heads, head_dim, cs.data());
}

}  // namespace squeeze::ops
