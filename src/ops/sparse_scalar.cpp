// Scalar reference of the sparse products (sparse_gemv.h): the order of every sum is the one
// the SIMD twins keep, with separate multiplies and adds where they fuse them.
#include <algorithm>

#include "core/fp16.h"
#include "ops/sparse_gemv.h"

namespace squeeze::ops {

namespace {

using formats::DType;

// acc[r - r0] += xc * q[r, c] over the row slice, for one active input of a quantized block.
void add_column_q8(const int8_t* q, float xc, int64_t r0, int64_t r1, float* acc) {
  for (int64_t r = r0; r < r1; ++r) acc[r - r0] += xc * static_cast<float>(q[r]);
}

void add_column_q4(const uint8_t* q, float xc, int64_t r0, int64_t r1, float* acc) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t byte = q[(r / 32) * 16 + r % 16];
    const int code = r % 32 < 16 ? byte & 0xF : byte >> 4;
    acc[r - r0] += xc * static_cast<float>(code);
  }
}

void sparse_f16(const ColumnWeights& w, const float* x, const int32_t* idx, int64_t n_active,
                int64_t r0, int64_t r1, float* y) {
  for (int64_t i = 0; i < n_active; ++i) {
    const f16_t* col = reinterpret_cast<const f16_t*>(w.data + idx[i] * w.column_bytes);
    const float xc = x[idx[i]];
    for (int64_t r = r0; r < r1; ++r) y[r] += xc * f16_to_f32(col[r]);
  }
}

}  // namespace

void sparse_gemv_scalar(const ColumnWeights& w, const float* x, const int32_t* idx,
                        int64_t n_active, int64_t r0, int64_t r1, float* y, float* scratch) {
  std::fill(y + r0, y + r1, 0.0f);
  if (w.type == DType::F16) {
    sparse_f16(w, x, idx, n_active, r0, r1, y);
    return;
  }
  constexpr int kBlock = 32;  // w.block_inputs of the quantized layouts
  const int64_t n = r1 - r0;
  for (int64_t i = 0; i < n_active;) {
    // The active inputs of one block: [i, i1).
    const int64_t b = idx[i] / kBlock;
    int64_t i1 = i + 1;
    while (i1 < n_active && idx[i1] / kBlock == b) ++i1;
    const uint8_t* blk = w.data + b * w.block_bytes;
    std::fill(scratch, scratch + n, 0.0f);
    float sx = 0.0f;  // the sum of the block's active inputs, for Q4's offsets
    for (; i < i1; ++i) {
      const float xc = x[idx[i]];
      const uint8_t* col = blk + w.header_bytes + (idx[i] % kBlock) * w.column_bytes;
      sx += xc;
      if (w.type == DType::Q8_0) {
        add_column_q8(reinterpret_cast<const int8_t*>(col), xc, r0, r1, scratch);
      } else {
        add_column_q4(col, xc, r0, r1, scratch);
      }
    }
    // Fold the block with its scales.
    const f16_t* d = reinterpret_cast<const f16_t*>(blk);
    const f16_t* m = d + w.n_rows;  // Q4_1's mins
    for (int64_t r = r0; r < r1; ++r) {
      const float acc = scratch[r - r0];
      switch (w.type) {
        case DType::Q8_0: y[r] += f16_to_f32(d[r]) * acc; break;
        case DType::Q4_0: y[r] += f16_to_f32(d[r]) * (acc - 8.0f * sx); break;
        default: y[r] += f16_to_f32(d[r]) * acc + f16_to_f32(m[r]) * sx; break;
      }
    }
  }
}

}  // namespace squeeze::ops
