// squeeze's packed sparse weight format SP8_50 (blocks.h, BlockSp8): pruned Q8_0 blocks that
// keep at most 16 of their 32 weights store only those, with a 32-bit mask: 22 bytes instead of
// 34, so a matrix pruned to N:M with N >= M / 2 (2:4, 4:8, 16:32) reads 35% fewer weight bytes
// per token. Its products are Q8_0's in block order (vec_dot_q8_0_blocks): each block's exact
// integer sum (the dropped weights are zero in the dense file and add nothing), times
// d_w * d_x, fused-multiply-added in block order, so a pruned Q8_0 matrix and its SP8_50 copy
// give the same bits on the AVX-512 tier.
#pragma once

#include <cstdint>

namespace squeeze::formats {

// Kept weights per SP8_50 block at most.
inline constexpr int kSp8Kept = 16;

// Every block keeps exactly 16 weights (a block with fewer non-zero codes keeps some zeros),
// so the kernels read each block's codes as 16 bytes; files are checked for it (sp8_valid).

// Repacks a row of n Q8_0 weights (n a multiple of 32) as SP8_50: the same scale and codes,
// the zero codes dropped but for those that make up 16 (the first ones). Returns false (dst
// partly written) when a block has more than 16 non-zero codes.
bool sp8_from_q8_0(const void* q8_0, void* dst, int64_t n);

// Whether each of n_blocks SP8_50 blocks at data keeps exactly 16 weights.
bool sp8_valid(const void* data, int64_t n_blocks);

}  // namespace squeeze::formats
