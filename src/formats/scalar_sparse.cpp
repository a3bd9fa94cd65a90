// Scalar kernels of the packed sparse format SP8_50 (sparse.h).
#include <cmath>
#include <cstring>
#include <algorithm>

#include "formats/blocks.h"
#include "formats/kernel_list.h"
#include "formats/sparse.h"

namespace squeeze::formats {

namespace {

uint32_t block_mask(const BlockSp8& b) {
  uint32_t m;
  std::memcpy(&m, b.mask, sizeof m);
  return m;
}

void set_block_mask(BlockSp8& b, uint32_t m) { std::memcpy(b.mask, &m, sizeof m); }

}  // namespace

bool sp8_from_q8_0(const void* q8_0, void* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(q8_0);
  auto* y = static_cast<BlockSp8*>(dst);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    uint32_t mask = 0;
    int kept = 0;
    for (int j = 0; j < kBlock32; ++j) {
      if (x[i].qs[j] != 0) {
        mask |= 1u << j;
        ++kept;
      }
    }
    if (kept > kSp8Kept) return false;
    // Exactly 16 kept (zeros among them where the block has fewer non-zeros), so the kernels
    // can take every block's codes as 16 bytes.
    for (int j = 0; kept < kSp8Kept; ++j) {
      if ((mask >> j & 1u) == 0) {
        mask |= 1u << j;
        ++kept;
      }
    }
    BlockSp8 b{};
    b.d = x[i].d;
    set_block_mask(b, mask);
    for (int j = 0, k = 0; j < kBlock32; ++j) {
      if (mask >> j & 1u) b.qs[k++] = x[i].qs[j];
    }
    y[i] = b;
  }
  return true;
}

bool sp8_valid(const void* data, int64_t n_blocks) {
  const auto* x = static_cast<const BlockSp8*>(data);
  for (int64_t i = 0; i < n_blocks; ++i) {
    if (__builtin_popcount(block_mask(x[i])) != kSp8Kept) return false;
  }
  return true;
}

namespace scalar {

// From floats (any input): Q8_0's reference codes (d = amax / 127, round half away from zero),
// then the 16 largest |x| of a block kept where more than 16 codes are non-zero (ties to the
// lower index). On a block with at most 16 non-zeros this is the Q8_0 file's block, repacked.
void quantize_sp8_50(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockSp8*>(dst);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    BlockQ8_0 q;
    quantize_q8_0_ref(src + i * kBlock32, &q, kBlock32);
    int order[kBlock32];
    for (int j = 0; j < kBlock32; ++j) order[j] = j;
    const float* x = src + i * kBlock32;
    std::stable_sort(order, order + kBlock32,
                     [&](int a, int b) { return std::fabs(x[a]) > std::fabs(x[b]); });
    for (int j = kSp8Kept; j < kBlock32; ++j) q.qs[order[j]] = 0;
    sp8_from_q8_0(&q, y + i, kBlock32);
  }
}

void dequantize_sp8_50(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockSp8*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint32_t mask = block_mask(x[i]);
    int k = 0;
    for (int j = 0; j < kBlock32; ++j) {
      dst[i * kBlock32 + j] = (mask >> j & 1u) ? x[i].qs[k++] * d : 0.0f;
    }
  }
}

// vec_dot_q8_0_blocks's order: each block's int sum, fused-multiply-added with d_w * d_x.
float vec_dot_sp8_50(int64_t n, const void* w, const void* x) {
  const auto* a = static_cast<const BlockSp8*>(w);
  const auto* b = static_cast<const BlockQ8_0*>(x);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    uint32_t mask = block_mask(a[i]);
    int32_t sumi = 0;
    for (int k = 0; mask != 0 && k < kSp8Kept; ++k, mask &= mask - 1) {
      sumi += a[i].qs[k] * b[i].qs[__builtin_ctz(mask)];
    }
    acc = std::fma(static_cast<float>(sumi), f16_to_f32(a[i].d) * f16_to_f32(b[i].d), acc);
  }
  return acc;
}

}  // namespace scalar
}  // namespace squeeze::formats
