// Keys quantized before RoPE (KVQuant, --kv-k-prerope): each layer's rotary embedding of keys,
// with the cos and sin of every position it has been asked for tabled once per distinct
// rotation (layers with the same base share a table; Gemma 3's local and global bases differ),
// so a quantized cache turns a key back to its pre-RoPE value before freezing it and forward
// again when it reads it, without recomputing angles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/rope.h"

namespace squeeze::kv {

class KeyRope {
 public:
  KeyRope() = default;
  // One rotation per layer; keys are rows of heads of head_dim values (UsageError otherwise).
  KeyRope(std::vector<ops::Rope> per_layer, int64_t head_dim, int64_t row);

  bool empty() const { return rope_.empty(); }
  // Tables the angles of positions up to max_pos.
  void grow(int64_t max_pos);
  // Rotates n values (whole heads) of a key of layer il to position pos (a position grow()
  // covered), or back from it when inverse.
  void rotate(int64_t il, float* x, int64_t n, int64_t pos, bool inverse = false) const;
  // The same forward rotation for n tokens of one head laid out by dimension: dimension d of
  // token t at x[d * stride + t], token t at position pos[t] (plain arithmetic, no fused
  // multiply-add: the decode kernels' twins share it).
  void rotate_tile(int64_t il, float* x, int64_t stride, const int32_t* pos, int64_t n) const;
  // Memory of the tables.
  size_t bytes() const;

 private:
  std::vector<ops::Rope> rope_;
  int64_t head_dim_ = 0;
  std::vector<size_t> table_;               // [n_layer] its table in angles_
  std::vector<std::vector<float>> angles_;  // per table [positions, n_rot] cos, sin
};

}  // namespace squeeze::kv
