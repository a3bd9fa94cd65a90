// Internal (scalar code only): the accumulation order of ggml's AVX2 block dot products,
// written out lane by lane.
//
// llama.cpp's x86 kernels sum each block's int8 products in 8 lanes of 4 adjacent products,
// fold every lane into a float accumulator with a fused multiply-add by the block's scale
// product, and add the 8 lanes at the end in a fixed tree. Float addition is not associative,
// and the next layer re-rounds activations to 8 bits, so a different order changes a few codes
// per layer and the model's logits by up to ~1% of their range. The scalar reference therefore
// sums in the same order as the AVX2 kernels (and as llama.cpp): both paths give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

namespace squeeze::formats {

class LaneAccumulator {
 public:
  // products[j] for j < 32: the exact int products of one block, in unpacked element order.
  void add_block(float scale, const int32_t* products) {
    for (int l = 0; l < 8; ++l) {
      const int32_t lane = products[4 * l] + products[4 * l + 1] + products[4 * l + 2] +
                           products[4 * l + 3];
      acc_[l] = std::fma(scale, static_cast<float>(lane), acc_[l]);
    }
  }
  // Lane-wise acc += other.acc: how a kernel that alternates two accumulators (to shorten its
  // dependency chain) merges them before the horizontal sum.
  void add(const LaneAccumulator& other) {
    for (int l = 0; l < 8; ++l) acc_[l] += other.acc_[l];
  }
  // The horizontal sum in the AVX2 order: halves, then pairs, then the last two.
  float sum() const {
    const float s0 = acc_[0] + acc_[4], s1 = acc_[1] + acc_[5];
    const float s2 = acc_[2] + acc_[6], s3 = acc_[3] + acc_[7];
    return (s0 + s2) + (s1 + s3);
  }

 private:
  float acc_[8] = {};
};

}  // namespace squeeze::formats
