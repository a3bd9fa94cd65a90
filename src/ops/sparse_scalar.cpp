// Scalar reference of the sparse products (sparse_gemv.h): the order of every float sum is the
// one the SIMD twins keep, with separate multiplies and adds where they fuse them (F16, Q8_0);
// the Q4 products are integer sums folded with the same float operations as the SIMD twins, so
// those equal this one bit for bit.
#include <algorithm>
#include <cmath>

#include "core/fp16.h"
#include "ops/sparse_gemv.h"

namespace squeeze::ops {

namespace {

using formats::DType;
constexpr int kBlock = 32;  // w.block_inputs of the quantized layouts

void sparse_f16(const ColumnWeights& w, const float* x, const int32_t* idx, int64_t n_active,
                int64_t r0, int64_t r1, float* y) {
  for (int64_t i = 0; i < n_active; ++i) {
    const f16_t* col = reinterpret_cast<const f16_t*>(w.data + idx[i] * w.column_bytes);
    const float xc = x[idx[i]];
    for (int64_t r = r0; r < r1; ++r) y[r] += xc * f16_to_f32(col[r]);
  }
}

// Q8_0: float sums per block, then y += d * acc.
void sparse_q8(const ColumnWeights& w, const float* x, const int32_t* idx, int64_t n_active,
               int64_t r0, int64_t r1, float* y, float* scratch) {
  const int64_t n = r1 - r0;
  for (int64_t i = 0; i < n_active;) {
    // The active inputs of one block: [i, i1).
    const int64_t b = idx[i] / kBlock;
    int64_t i1 = i + 1;
    while (i1 < n_active && idx[i1] / kBlock == b) ++i1;
    const uint8_t* blk = w.data + b * w.block_bytes;
    std::fill(scratch, scratch + n, 0.0f);
    for (; i < i1; ++i) {
      const float xc = x[idx[i]];
      const auto* q = reinterpret_cast<const int8_t*>(blk + w.header_bytes +
                                                      (idx[i] % kBlock) * w.column_bytes);
      for (int64_t r = r0; r < r1; ++r) scratch[r - r0] += xc * static_cast<float>(q[r]);
    }
    const f16_t* d = reinterpret_cast<const f16_t*>(blk);
    for (int64_t r = r0; r < r1; ++r) y[r] += f16_to_f32(d[r]) * scratch[r - r0];
  }
}

// Q4_0 / Q4_1: exact integer block sums, folded as the SIMD twins fold them.
void sparse_q4(const ColumnWeights& w, const SparseInput& in, int64_t k0, int64_t k1,
               int64_t r0, int64_t r1, float* y) {
  const bool q41 = w.type == DType::Q4_1;
  for (int64_t r = r0; r < r1; ++r) {
    int shift = 0;
    const int64_t pos = q4_code_offset(w.n_rows, r, &shift);
    float yr = 0.0f;
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t b = in.blocks[k];
      const uint8_t* blk = w.data + b * w.block_bytes;
      const uint8_t* cols = blk + w.header_bytes + pos;
      int32_t sum = 0;
      for (int64_t i = in.block_first[k]; i < in.block_first[k + 1]; ++i) {
        const int c = in.idx[i] % kBlock;
        sum += in.xq[in.idx[i]] * ((cols[c * w.column_bytes] >> shift) & 0xF);
      }
      if (!q41) sum -= 8 * in.qsum[b];
      const f16_t* d = reinterpret_cast<const f16_t*>(blk);
      if (q41) yr = std::fma(f16_to_f32(d[w.n_rows + r]), in.qsum_s[b], yr);
      yr = std::fma(f16_to_f32(d[r]) * in.scale[b], static_cast<float>(sum), yr);
    }
    y[r] = yr;
  }
}

}  // namespace

void sparse_gemv_scalar(const ColumnWeights& w, const SparseInput& in, int64_t k0, int64_t k1,
                        int64_t r0, int64_t r1, float* y, float* scratch) {
  if (w.type == DType::Q4_0 || w.type == DType::Q4_1) {
    sparse_q4(w, in, k0, k1, r0, r1, y);
    return;
  }
  std::fill(y + r0, y + r1, 0.0f);
  const int64_t i0 = in.block_first[k0], i1 = in.block_first[k1];
  if (w.type == DType::F16) {
    sparse_f16(w, in.x, in.idx + i0, i1 - i0, r0, r1, y);
  } else {
    sparse_q8(w, in.x, in.idx + i0, i1 - i0, r0, r1, y, scratch);
  }
}

}  // namespace squeeze::ops
