// Scalar reference decoding and dot products of the K formats Q4_K and Q6_K (super-blocks of
// 256, activations in Q8_K). Per super-block the dot product is an exact int32 sum scaled
// once, as in ggml's ggml_vec_dot_q4_K_q8_K_generic / q6_K.
#include <cmath>

#include "formats/blocks.h"
#include "formats/k_orders.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::scalar {
namespace {

// The 256 codes of a Q4_K block in element order, q in [0, 15].
void unpack_q4_k(const BlockQ4_K& b, uint8_t* q) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = b.qs[32 * c + l] & 0x0F;
      q[64 * c + 32 + l] = b.qs[32 * c + l] >> 4;
    }
  }
}

// The 256 codes of a Q6_K block in element order, minus 32: q in [-32, 31].
void unpack_q6_k(const BlockQ6_K& b, int8_t* q) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    int8_t* out = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      out[l] = static_cast<int8_t>(((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32);
      out[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32);
      out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

}  // namespace

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float dmin = f16_to_f32(x[i].dmin);
    uint8_t q[kSuperBlock];
    unpack_q4_k(x[i], q);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4k_scale_min(j, x[i].scales, &sc, &m);
      const float dj = d * sc;
      const float mj = dmin * m;
      float* y = dst + i * kSuperBlock + 32 * j;
      for (int l = 0; l < 32; ++l) y[l] = dj * q[32 * j + l] - mj;
    }
  }
}

// sum_j d*sc_j * dot(q_j, q8_j) - dmin * sum_j m_j * sum(q8_j), with d and dmin times d_x.
float vec_dot_q4_k(int64_t n, const void* w, const void* x) {
  const BlockQ4_K* a = static_cast<const BlockQ4_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    uint8_t q[kSuperBlock];
    unpack_q4_k(a[i], q);
    int32_t sumi = 0;
    int32_t summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4k_scale_min(j, a[i].scales, &sc, &m);
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) dot += q[32 * j + l] * b[i].qs[32 * j + l];
      sumi += sc * dot;
      summ += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
    }
    sum += (f16_to_f32(a[i].d) * b[i].d) * static_cast<float>(sumi);
    sum -= (f16_to_f32(a[i].dmin) * b[i].d) * static_cast<float>(summ);
  }
  return sum;
}

namespace {

// The exact int sums of a Q4_K x Q8_K super-block per pair of sub-blocks (pair p: sub-blocks
// 2p and 2p + 1): scale * q * q8, and min * (sum of the pair's q8).
void q4_k_pair_sums(const BlockQ4_K& a, const BlockQ8_K& b, int32_t sums[4], int32_t mins[4]) {
  uint8_t q[kSuperBlock];
  unpack_q4_k(a, q);
  for (int p = 0; p < 4; ++p) {
    sums[p] = mins[p] = 0;
    for (int j = 2 * p; j < 2 * p + 2; ++j) {
      uint8_t sc, m;
      q4k_scale_min(j, a.scales, &sc, &m);
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) dot += q[32 * j + l] * b.qs[32 * j + l];
      sums[p] += sc * dot;
      mins[p] += m * (b.bsums[2 * j] + b.bsums[2 * j + 1]);
    }
  }
}

// The exact sum_j scale_j * sum((q - 32) * q8) of a Q6_K x Q8_K super-block.
int32_t q6_k_block_sum(const BlockQ6_K& a, const BlockQ8_K& b) {
  int8_t q[kSuperBlock];
  unpack_q6_k(a, q);
  int32_t sumi = 0;
  for (int j = 0; j < 16; ++j) {
    int32_t dot = 0;
    for (int l = 0; l < 16; ++l) dot += q[16 * j + l] * b.qs[16 * j + l];
    sumi += a.scales[j] * dot;
  }
  return sumi;
}

}  // namespace

// llama.cpp's orders (k_orders.h) over this file's int sums.
float vec_dot_q4_k_repacked(int64_t n, const void* w, const void* x) {
  return k_orders::q4_k_repacked(n, w, x, q4_k_pair_sums);
}

float vec_dot_q4_k_repacked_pairs(int64_t n, const void* w, const void* x) {
  return k_orders::q4_k_repacked_pairs(n, w, x, q4_k_pair_sums);
}

float vec_dot_q4_k_tiled(int64_t n, const void* w, const void* x) {
  return k_orders::q4_k_tiled(n, w, x, q4_k_pair_sums);
}

void gemm_q4_k_repacked(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
                        size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  k_orders::gemm_in_groups_of_4(n, w, w_stride, n_rows, x, x_stride, n_tokens, y, y_stride,
                                vec_dot_q4_k_repacked_pairs, vec_dot_q4_k_repacked);
}

void gemm_q4_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
               size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  k_orders::gemm_tiled_from_8(n, w, w_stride, n_rows, x, x_stride, n_tokens, y, y_stride,
                              vec_dot_q4_k_tiled, vec_dot_q4_k);
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    const float d = f16_to_f32(x[i].d);
    int8_t q[kSuperBlock];
    unpack_q6_k(x[i], q);
    for (int j = 0; j < 16; ++j) {
      const float dj = d * x[i].scales[j];
      float* y = dst + i * kSuperBlock + 16 * j;
      for (int l = 0; l < 16; ++l) y[l] = dj * q[16 * j + l];
    }
  }
}

float vec_dot_q6_k(int64_t n, const void* w, const void* x) {
  const BlockQ6_K* a = static_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* b = static_cast<const BlockQ8_K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    sum += (f16_to_f32(a[i].d) * b[i].d) * static_cast<float>(q6_k_block_sum(a[i], b[i]));
  }
  return sum;
}

float vec_dot_q6_k_tiled(int64_t n, const void* w, const void* x) {
  return k_orders::q6_k_tiled(n, w, x, q6_k_block_sum);
}

void gemm_q6_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
               size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  k_orders::gemm_tiled_from_8(n, w, w_stride, n_rows, x, x_stride, n_tokens, y, y_stride,
                              vec_dot_q6_k_tiled, vec_dot_q6_k);
}

}  // namespace squeeze::formats::scalar
