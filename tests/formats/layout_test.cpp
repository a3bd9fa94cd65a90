// Cases small enough to check by hand: blocks built byte by byte from the layouts in
// docs/FORMATS.md decode to the values worked out here, and ggml's reference rounding rules
// (round half away from zero for Q8_0/Q8_1, half to even for Q8_K, "+ 8.5 then truncate" for
// Q4_0) give the codes worked out here. Each runs on both ISAs.
#include <gtest/gtest.h>

#include <cstring>

#include "format_test_util.h"
#include "formats/blocks.h"

namespace squeeze::formats::test {
namespace {

class Layout : public testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (unavailable(GetParam())) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  }
  template <typename Block>
  std::vector<float> decode(DType type, const Block& b, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    kernels(type, GetParam()).dequantize_row(&b, out.data(), n);
    return out;
  }
  template <typename Block>
  Block encode(DType type, const std::vector<float>& x) {
    Block b;
    std::memset(&b, 0xAB, sizeof b);
    kernels(type, GetParam()).quantize_row(x.data(), &b, static_cast<int64_t>(x.size()));
    return b;
  }
};

constexpr f16_t kHalfOne = 0x3C00;   // 1.0
constexpr f16_t kHalfHalf = 0x3800;  // 0.5
constexpr f16_t kHalfTwo = 0x4000;   // 2.0

TEST_P(Layout, Q4_0NibbleOrder) {
  BlockQ4_0 b{};
  b.d = kHalfTwo;
  b.qs[0] = 0x3A;   // element 0: 0xA - 8 = 2; element 16: 3 - 8 = -5
  b.qs[15] = 0xF0;  // element 15: 0 - 8 = -8; element 31: 15 - 8 = 7
  const auto y = decode(DType::Q4_0, b, 32);
  EXPECT_EQ(y[0], 4.0f);
  EXPECT_EQ(y[16], -10.0f);
  EXPECT_EQ(y[15], -16.0f);
  EXPECT_EQ(y[31], 14.0f);
  EXPECT_EQ(y[1], -16.0f);  // qs[1] = 0: code 0
}

TEST_P(Layout, Q4_1AddsTheMin) {
  BlockQ4_1 b{};
  b.d = kHalfHalf;
  b.m = 0xC000;    // -2
  b.qs[3] = 0x5C;  // element 3: 12 * 0.5 - 2 = 4; element 19: 5 * 0.5 - 2 = 0.5
  const auto y = decode(DType::Q4_1, b, 32);
  EXPECT_EQ(y[3], 4.0f);
  EXPECT_EQ(y[19], 0.5f);
  EXPECT_EQ(y[0], -2.0f);
}

TEST_P(Layout, Q5_0HighBitsComeFromQh) {
  BlockQ5_0 b{};
  b.d = kHalfOne;
  const uint32_t qh = (1u << 1) | (1u << 17);  // bit 4 of elements 1 and 17
  std::memcpy(b.qh, &qh, 4);
  b.qs[1] = 0x32;  // element 1: 2 | 16 = 18 -> 2; element 17: 3 | 16 = 19 -> 3
  b.qs[2] = 0x32;  // element 2: 2 -> -14; element 18: 3 -> -13
  const auto y = decode(DType::Q5_0, b, 32);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_EQ(y[17], 3.0f);
  EXPECT_EQ(y[2], -14.0f);
  EXPECT_EQ(y[18], -13.0f);
  EXPECT_EQ(y[0], -16.0f);
}

TEST_P(Layout, Q5_1HighBitsAndMin) {
  BlockQ5_1 b{};
  b.d = kHalfOne;
  b.m = kHalfHalf;
  const uint32_t qh = 1u << 31;  // element 31
  std::memcpy(b.qh, &qh, 4);
  b.qs[15] = 0xF1;  // element 15: 1 -> 1.5; element 31: 15 | 16 = 31 -> 31.5
  const auto y = decode(DType::Q5_1, b, 32);
  EXPECT_EQ(y[15], 1.5f);
  EXPECT_EQ(y[31], 31.5f);
}

TEST_P(Layout, Q8_0AndQ8_1Decode) {
  BlockQ8_0 a{};
  a.d = kHalfHalf;
  a.qs[7] = -127;
  EXPECT_EQ(decode(DType::Q8_0, a, 32)[7], -63.5f);
  BlockQ8_1 b{};
  b.d = kHalfTwo;
  b.s = kHalfOne;  // ignored by decoding
  b.qs[31] = 100;
  EXPECT_EQ(decode(DType::Q8_1, b, 32)[31], 200.0f);
}

TEST_P(Layout, Q4_KScalesMinsAndNibbles) {
  BlockQ4_K b{};
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  // Sub-block 1 (elements 32..63): scale 2, min 3 -> bytes 1 and 5, low 6 bits.
  b.scales[1] = 2;
  b.scales[5] = 3;
  // Sub-block 6 (elements 192..223): scale 53 = 0b11'0101, min 34 = 0b10'0010. Low nibbles
  // in byte 10 (scale low, min high); top two bits in the top bits of bytes 2 and 6.
  b.scales[10] = 0x25;
  b.scales[2] = 0xC0;
  b.scales[6] = 0x80;
  b.qs[8] = 0x50;    // chunk 0, l = 8: element 8 (low) = 0, element 40 (high) = 5
  b.qs[104] = 0x07;  // chunk 3, l = 8: element 200 (low) = 7
  const auto y = decode(DType::Q4_K, b, 256);
  EXPECT_EQ(y[40], 1.0f * 2 * 5 - 0.5f * 3);     // 8.5
  EXPECT_EQ(y[200], 1.0f * 53 * 7 - 0.5f * 34);  // 354
  EXPECT_EQ(y[8], 0.0f);                         // sub-block 0: scale 0, min 0
  EXPECT_EQ(y[33], -1.5f);                       // code 0 in sub-block 1: just the min
}

TEST_P(Layout, Q6_KLowAndHighBits) {
  BlockQ6_K b{};
  b.d = kHalfHalf;
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j - 8);
  // Element 200 = half 1, l = 8, third group: ql[64 + 8] high nibble, qh[32 + 8] bits 4-5.
  b.ql[72] = 0xA0;  // 10
  b.qh[40] = 0x20;  // 2 -> code 10 | 2 << 4 = 42 -> 42 - 32 = 10
  // Element 37 = half 0, l = 5, second group: ql[32 + 5] low nibble, qh[5] bits 2-3.
  b.ql[37] = 0x03;
  b.qh[5] = 0x0C;  // 3 -> code 3 | 48 = 51 -> 19
  const auto y = decode(DType::Q6_K, b, 256);
  EXPECT_EQ(y[200], 0.5f * (12 - 8) * 10);  // sub-block 12
  EXPECT_EQ(y[37], 0.5f * (2 - 8) * 19);    // sub-block 2
  EXPECT_EQ(y[0], 0.5f * (0 - 8) * -32);    // code 0 everywhere else
}

TEST_P(Layout, Q8_KDecodesWithAFloatScale) {
  BlockQ8_K b{};
  b.d = 0.25f;
  b.qs[255] = -3;
  EXPECT_EQ(decode(DType::Q8_K, b, 256)[255], -0.75f);
}

// amax = 127 makes d = 1 exactly, so the codes are the rounded inputs themselves. Ties go to
// even, as llama.cpp's x86 activation quantizer (_mm256_round_ps, nearest) does.
TEST_P(Layout, Q8_0RoundsHalfToEven) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  x[4] = -0.5f;
  x[5] = 1.49f;
  x[6] = -126.6f;
  const auto b = encode<BlockQ8_0>(DType::Q8_0, x);
  EXPECT_EQ(b.d, kHalfOne);
  const int8_t want[] = {127, 2, -2, 0, 0, 1, -127, 0};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(b.qs[j], want[j]) << j;
}

TEST_P(Layout, Q8_1StoresTheScaledSum) {
  std::vector<float> x(32, 0.0f);
  x[0] = -127.0f;
  x[1] = 2.5f;   // 2 (tie to even)
  x[2] = 10.0f;  // 10
  const auto b = encode<BlockQ8_1>(DType::Q8_1, x);
  EXPECT_EQ(b.d, kHalfOne);
  EXPECT_EQ(f16_to_f32(b.s), -115.0f);  // 1 * (-127 + 2 + 10)
}

// s is rounded from the float d, not from the half d: amax = 100 gives d = 0.787402 (half:
// 0.787598); codes 127 and round(30 / d) = 38 sum to 165; 165 * 0.787402 = 129.92 rounds to
// the half 129.875, while the half d would give 129.95 -> 130.
TEST_P(Layout, Q8_1SumUsesTheUnroundedScale) {
  std::vector<float> x(32, 0.0f);
  x[0] = 100.0f;
  x[1] = 30.0f;
  const auto b = encode<BlockQ8_1>(DType::Q8_1, x);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 38);
  EXPECT_EQ(f16_to_f32(b.s), 129.875f);
}

TEST_P(Layout, Q8_ZeroBlockHasZeroScaleAndCodes) {
  const std::vector<float> x(256, 0.0f);
  const auto a = encode<BlockQ8_0>(DType::Q8_0, std::vector<float>(32, 0.0f));
  EXPECT_EQ(a.d, 0);
  for (int8_t q : a.qs) EXPECT_EQ(q, 0);
  const auto k = encode<BlockQ8_K>(DType::Q8_K, x);
  EXPECT_EQ(k.d, 0.0f);
  for (int8_t q : k.qs) EXPECT_EQ(q, 0);
  for (int16_t s : k.bsums) EXPECT_EQ(s, 0);
}

// The first value of largest magnitude (-127 at index 3, before +127 at index 5) fixes the
// sign: iscale = -127 / -127 = 1. Codes round half to even.
TEST_P(Layout, Q8_KRoundsHalfToEvenAndKeepsBlockSums) {
  std::vector<float> x(256, 0.0f);
  x[3] = -127.0f;
  x[5] = 127.0f;
  x[6] = 2.5f;
  x[7] = -2.5f;
  x[8] = 3.5f;
  x[20] = 1.5f;
  const auto b = encode<BlockQ8_K>(DType::Q8_K, x);
  EXPECT_EQ(b.d, 1.0f);
  EXPECT_EQ(b.qs[3], -127);
  EXPECT_EQ(b.qs[5], 127);
  EXPECT_EQ(b.qs[6], 2);
  EXPECT_EQ(b.qs[7], -2);
  EXPECT_EQ(b.qs[8], 4);
  EXPECT_EQ(b.qs[20], 2);
  EXPECT_EQ(b.bsums[0], -127 + 127 + 2 - 2 + 4);
  EXPECT_EQ(b.bsums[1], 2);
  // With +127 first the sign flips: codes are the negated inputs and d = -1.
  std::swap(x[3], x[5]);
  const auto c = encode<BlockQ8_K>(DType::Q8_K, x);
  EXPECT_EQ(c.d, -1.0f);
  EXPECT_EQ(c.qs[3], -127);
  EXPECT_EQ(c.qs[6], -2);
}

// Q4_0: the largest-magnitude value (-8) maps to code 0, d = -8 / -8 = 1; codes are
// min(15, trunc(x + 8.5)), i.e. halves round up.
TEST_P(Layout, Q4_0ReferenceRounding) {
  std::vector<float> x(32, 0.0f);
  x[0] = -8.0f;
  x[1] = 0.5f;    // 9  -> decodes to 1
  x[2] = -0.5f;   // 8  -> 0
  x[3] = 7.6f;    // 16 -> clipped to 15 -> 7
  x[16] = 3.49f;  // 11 -> 3
  const auto b = encode<BlockQ4_0>(DType::Q4_0, x);
  EXPECT_EQ(b.d, kHalfOne);
  const auto y = decode(DType::Q4_0, b, 32);
  EXPECT_EQ(y[0], -8.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 7.0f);
  EXPECT_EQ(y[16], 3.0f);
  EXPECT_EQ(b.qs[0], 0x00 | (11 << 4));  // element 0 (code 0) and element 16 (code 11)
}

// Integers 0..31 quantize exactly with Q5_1 (d = 1, m = 0) and 0..15 with Q4_1.
TEST_P(Layout, AffineFormatsRepresentIntegerRampsExactly) {
  std::vector<float> ramp(32);
  for (int j = 0; j < 32; ++j) ramp[j] = static_cast<float>(j);
  const auto b5 = encode<BlockQ5_1>(DType::Q5_1, ramp);
  EXPECT_EQ(decode(DType::Q5_1, b5, 32), ramp);
  for (int j = 0; j < 32; ++j) ramp[j] = static_cast<float>(j % 16);
  const auto b4 = encode<BlockQ4_1>(DType::Q4_1, ramp);
  EXPECT_EQ(decode(DType::Q4_1, b4, 32), ramp);
}

INSTANTIATE_TEST_SUITE_P(Isas, Layout, testing::Values(Isa::Scalar, Isa::Avx2),
                         [](const testing::TestParamInfo<Isa>& info) {
                           return std::string(isa_name(info.param));
                         });

}  // namespace
}  // namespace squeeze::formats::test
