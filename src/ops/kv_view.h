// What attention reads of a KV cache: one layer, one sequence.
#pragma once

#include <cstdint>

#include "core/fp16.h"

namespace squeeze::ops {

// Cells [0, n) hold the sequence's positions 0..n-1 in order; each is a row of K and a row of
// V of n_head_kv * head_dim halves (kv head h at columns h * head_dim..), row_stride halves
// apart. (kv/kv_cache.h makes them.)
struct KvView {
  const f16_t* k = nullptr;
  const f16_t* v = nullptr;
  int64_t row_stride = 0;
  int64_t n = 0;
};

}  // namespace squeeze::ops
