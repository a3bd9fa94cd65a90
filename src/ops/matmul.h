// Matrix products of a weight matrix in any supported format with float activations.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/thread_pool.h"
#include "ops/tensor.h"

namespace squeeze::ops {

// Reusable buffer for activations converted to a weight format's vec_dot_type.
struct MatmulScratch {
  std::vector<uint8_t> quantized;
};

// One product of a group: y[t, r] = sum_c w[r, c] * x[t, c], y with row stride y_stride.
struct MatmulOut {
  const WeightView* w;
  float* y;
  int64_t y_stride;
};

// y[t, r] = sum_c W[r, c] * x[t, c]  for t < n_tokens, r < W.n_rows.
//   x: [n_tokens, W.n_cols] floats, row stride x_stride (elements)
//   y: [n_tokens, W.n_rows] floats, row stride y_stride (elements)
// The activations are converted once to the weight format's vec_dot_type (as ggml does), or
// for a batch of 16+ tokens into the layout of the ISA's batch kernels where it has them
// (formats::BatchGemm: the same results), then rows are split across the pool's threads.
void matmul(const WeightView& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
            int64_t y_stride, ThreadPool& pool, MatmulScratch& scratch);

// Several products of the same input (q, k and v; gate and up): where the matrices share a
// format, the activations are converted once and all their rows are split across the threads
// in one parallel region. Results equal separate matmul calls bit for bit.
void matmul(std::initializer_list<MatmulOut> outs, const float* x, int64_t n_tokens,
            int64_t x_stride, ThreadPool& pool, MatmulScratch& scratch);

// One token, some rows: y[rows[i]] = sum_c W[rows[i], c] * x[c] for i < n_rows (rows ascending
// and distinct; the other entries of y untouched), e.g. the up projection of the neurons CATS
// keeps. Reads only those rows; each equals matmul's y[row] bit for bit (same kernels and
// activation conversion).
void matmul_rows(const WeightView& w, const float* x, const int32_t* rows, int64_t n_rows,
                 float* y, ThreadPool& pool, MatmulScratch& scratch);

// Dequantizes row `r` of W into dst[0..W.n_cols).
void dequantize_row(const WeightView& w, int64_t r, float* dst);

}  // namespace squeeze::ops
