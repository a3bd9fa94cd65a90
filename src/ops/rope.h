// Rotary position embedding.
#pragma once

#include <cstdint>

namespace squeeze::ops {

enum class RopeLayout {
  Norm,  // rotate adjacent pairs (x[2i], x[2i+1]): llama.cpp's LLAMA_ROPE_TYPE_NORM (llama)
  Neox,  // rotate halves (x[i], x[i + n_rot/2]): LLAMA_ROPE_TYPE_NEOX (gemma, qwen, ...)
};

// Rotation for one rotary dimension count and frequency base.
class Rope {
 public:
  // theta_i(pos) = pos * freq_base^(-2i/n_rot), accumulated in float as ggml does, divided by
  // freq_factors[i] when given (n_rot / 2 of them: Llama 3.1+'s rope_freqs, which slow the low
  // frequencies down).
  Rope(int n_rot, float freq_base, RopeLayout layout, const float* freq_factors = nullptr);

  // Rotates the first n_rot dims of each of n_heads vectors of head_dim floats at `pos`.
  void apply(float* x, int n_heads, int head_dim, int64_t pos) const;

  // The same in two steps, so that the angles of a position are computed once for all layers:
  // cs[2i], cs[2i + 1] = cos, sin of theta_i(pos) for i < n_rot / 2 (n_rot floats), then the
  // rotation by them (the same values as apply(x, ..., pos)).
  void angles(int64_t pos, float* cs) const;
  void rotate(float* x, int n_heads, int head_dim, const float* cs) const;

  int n_rot() const { return n_rot_; }
  float freq_base() const { return freq_base_; }
  RopeLayout layout() const { return layout_; }
  const float* freq_factors() const { return freq_factors_; }

 private:
  int n_rot_;
  float freq_base_;
  RopeLayout layout_;
  const float* freq_factors_;  // null: all 1
  float theta_scale_;  // freq_base^(-2/n_rot)
};

}  // namespace squeeze::ops
