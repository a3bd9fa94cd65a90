// The float steps of llama.cpp's K-quant product orders (internal header), over the exact int
// sums of a super-block, which each ISA's file computes its own way (scalar_k.cpp, avx2_k.cpp):
// the results are the same bits on every ISA. Which order llama.cpp's x86 build takes depends on
// the matrix and the batch:
//   - a Q4_K matrix whose row count is a multiple of 8 is repacked: gemv_q4_K_8x8_q8_K (one
//     fused multiply-add per super-block, q4_k_repacked) for a batch's tokens outside whole
//     groups of 4, gemm_q4_K_8x8_q8_K (one per pair of sub-blocks, q4_k_repacked_pairs) inside;
//   - a K-quant matrix it does not repack: vec_dot below 8 tokens, its tiled kernel
//     (ggml-cpu/tiled: q4_k_tiled, q6_k_tiled) from 8 on.
// So a token's sums depend on the batch around it, as in llama.cpp.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/fp16.h"
#include "formats/blocks.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::k_orders {

// PairSums(a, b, sums, mins): per pair p of sub-blocks (2p, 2p + 1) of a Q4_K x Q8_K
// super-block, the exact sums of scale * q * q8 and of min * (the pair's sum of q8).
// acc += S * (d_w * d_x) and acc_min += M * (dmin_w * d_x), fused, once per super-block; the
// difference at the end.
template <typename PairSums>
float q4_k_repacked(int64_t n, const void* w, const void* x, PairSums pair_sums) {
  const BlockQ4_K* a = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  float acc = 0.0f;
  float acc_min = 0.0f;
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    int32_t sums[4], mins[4];
    pair_sums(a[i], b[i], sums, mins);
    acc = std::fma(static_cast<float>(sums[0] + sums[1] + sums[2] + sums[3]), f16_to_f32(a[i].d) * b[i].d, acc);
    acc_min = std::fma(static_cast<float>(mins[0] + mins[1] + mins[2] + mins[3]),
                       f16_to_f32(a[i].dmin) * b[i].d, acc_min);
  }
  return acc - acc_min;
}

// The same, once per pair of sub-blocks.
template <typename PairSums>
float q4_k_repacked_pairs(int64_t n, const void* w, const void* x, PairSums pair_sums) {
  const BlockQ4_K* a = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  float acc = 0.0f;
  float acc_min = 0.0f;
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    int32_t sums[4], mins[4];
    pair_sums(a[i], b[i], sums, mins);
    const float d = f16_to_f32(a[i].d) * b[i].d;
    const float dmin = f16_to_f32(a[i].dmin) * b[i].d;
    for (int p = 0; p < 4; ++p) {
      acc = std::fma(static_cast<float>(sums[p]), d, acc);
      acc_min = std::fma(static_cast<float>(mins[p]), dmin, acc_min);
    }
  }
  return acc - acc_min;
}

// The tiled kernel: per super-block r = d_w * S - dmin_w * M (the second product fused), then
// acc += r * d_x, fused.
template <typename PairSums>
float q4_k_tiled(int64_t n, const void* w, const void* x, PairSums pair_sums) {
  const BlockQ4_K* a = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    int32_t sums[4], mins[4];
    pair_sums(a[i], b[i], sums, mins);
    const float s = static_cast<float>(sums[0] + sums[1] + sums[2] + sums[3]);
    const float m = static_cast<float>(mins[0] + mins[1] + mins[2] + mins[3]);
    acc = std::fma(std::fma(-f16_to_f32(a[i].dmin), m, f16_to_f32(a[i].d) * s), b[i].d, acc);
  }
  return acc;
}

// BlockSum(a, b): the exact sum_j scale_j * sum((q - 32) * q8) of a Q6_K x Q8_K super-block.
// The tiled kernel: acc += (d_w * S) * d_x, fused.
template <typename BlockSum>
float q6_k_tiled(int64_t n, const void* w, const void* x, BlockSum block_sum) {
  const BlockQ6_K* a = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    acc = std::fma(f16_to_f32(a[i].d) * static_cast<float>(block_sum(a[i], b[i])), b[i].d, acc);
  }
  return acc;
}

// A repacked Q4_K matrix times a batch: tokens in whole groups of 4 in gemm's order (grouped),
// the rest in gemv's (single).
inline void gemm_in_groups_of_4(int64_t n, const void* w, size_t w_stride, int64_t n_rows,
                                const void* x, size_t x_stride, int64_t n_tokens, float* y,
                                int64_t y_stride, VecDotFn grouped, VecDotFn single) {
  const int64_t n_grouped = n_tokens - n_tokens % 4;
  for (int64_t r = 0; r < n_rows; ++r) {
    const void* wr = static_cast<const uint8_t*>(w) + r * w_stride;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const void* xt = static_cast<const uint8_t*>(x) + t * x_stride;
      y[t * y_stride + r] = (t < n_grouped ? grouped : single)(n, wr, xt);
    }
  }
}

// A K-quant matrix llama.cpp does not repack times a batch: from 8 tokens on every token in the
// tiled kernel's order (tiled), below that in vec_dot's (single).
inline void gemm_tiled_from_8(int64_t n, const void* w, size_t w_stride, int64_t n_rows,
                              const void* x, size_t x_stride, int64_t n_tokens, float* y,
                              int64_t y_stride, VecDotFn tiled, VecDotFn single) {
  const VecDotFn dot = n_tokens >= 8 ? tiled : single;
  for (int64_t r = 0; r < n_rows; ++r) {
    const void* wr = static_cast<const uint8_t*>(w) + r * w_stride;
    for (int64_t t = 0; t < n_tokens; ++t) {
      y[t * y_stride + r] = dot(n, wr, static_cast<const uint8_t*>(x) + t * x_stride);
    }
  }
}

}  // namespace squeeze::formats::k_orders
