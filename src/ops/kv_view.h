// What attention reads of a KV cache: one layer, one sequence.
#pragma once

#include <cstdint>
#include <span>

#include "core/fp16.h"

namespace squeeze::ops {

// The sequence's positions 0..n-1 are at cells[0..n): cell c holds a row of K at k + c *
// row_stride and one of V at v + c * row_stride, each n_head_kv * head_dim halves (kv head h at
// columns h * head_dim..). The cells of a paged cache (kv/kv_cache.h) run in blocks of 16.
struct KvView {
  const f16_t* k = nullptr;
  const f16_t* v = nullptr;
  int64_t row_stride = 0;
  std::span<const int32_t> cells;
  int64_t n() const { return static_cast<int64_t>(cells.size()); }
};

}  // namespace squeeze::ops
