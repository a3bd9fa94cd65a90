// A typed, read-only view of a 2-D weight matrix in some format (usually inside the mmap).
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/format.h"

namespace squeeze::ops {

struct WeightView {
  formats::DType type = formats::DType::F32;
  int64_t n_cols = 0;      // elements per row (ggml ne[0])
  int64_t n_rows = 0;      // ggml ne[1]
  size_t row_bytes = 0;    // bytes per row in `type`
  const uint8_t* data = nullptr;
  // Summed in llama.cpp's order on every tier: a format's own block order (Kernels::own_order,
  // Q8_0 on the AVX-512 and AMX tiers) is not used. Set for the output head (Model::load), so that logits
  // equal llama.cpp's where its blocks do: a Q8_0 head is what llama.cpp's quantizations keep.
  bool llama_order = false;

  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

}  // namespace squeeze::ops
