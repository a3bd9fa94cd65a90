// core/fp16.h conversions: special values by hand, and every half / many floats against the
// CPU's own F16C conversion instructions (when present).
#include "core/fp16.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/cpu.h"

namespace squeeze {
namespace {

TEST(Fp16, SpecialValuesToFloat) {
  EXPECT_EQ(f32_to_bits(f16_to_f32(0x0000)), 0x00000000u);  // +0
  EXPECT_EQ(f32_to_bits(f16_to_f32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);                  // largest finite
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));  // signalling NaN stays a NaN
}

TEST(Fp16, SpecialValuesFromFloat) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);  // below the midpoint to 65536: stays finite
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // the midpoint rounds to even: infinity
  EXPECT_EQ(f32_to_f16(1e10f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::quiet_NaN()), 0x7E00);
  // Ties round to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Subnormal results, their rounding, and underflow.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // tie to even (2)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -24)), 0x8001);
}

TEST(Bf16, SpecialValues) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(f32_to_bits(bf16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(bf16_to_f32(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // Ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3F808000u)), 0x3F80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3F818000u)), 0x3F82);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3F808001u)), 0x3F81);
  // The largest finite float rounds up to infinity.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  // NaNs stay NaNs, quiet, with their sign, even when rounding would carry into infinity.
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0xFFFFFFFFu)), 0xFFFF);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Bf16, EveryBf16RoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = bf16_to_f32(static_cast<bf16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h);
  }
}

__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

TEST(Fp16, EveryHalfMatchesTheCpu) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU lacks F16C";
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float ours = f16_to_f32(static_cast<f16_t>(h));
    const float cpu = hw_f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(cpu)) {
      ASSERT_TRUE(std::isnan(ours)) << std::hex << h;
      continue;
    }
    ASSERT_EQ(f32_to_bits(ours), f32_to_bits(cpu)) << std::hex << h;
    ASSERT_EQ(f32_to_f16(ours), h) << std::hex << h;  // and back
  }
}

TEST(Fp16, FloatsRoundLikeTheCpu) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU lacks F16C";
  std::mt19937 rng(7);
  // Random bit patterns over the whole float range, plus every halfway point between halves.
  for (int i = 0; i < 1 << 20; ++i) {
    const float f = bits_to_f32(rng());
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), hw_f32_to_f16(f)) << std::hex << f32_to_bits(f);
  }
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const float lo = f16_to_f32(static_cast<f16_t>(h));
    const float hi = f16_to_f32(static_cast<f16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    ASSERT_EQ(f32_to_f16(mid), hw_f32_to_f16(mid)) << std::hex << h;
    ASSERT_EQ(f32_to_f16(-mid), hw_f32_to_f16(-mid)) << std::hex << h;
  }
}

}  // namespace
}  // namespace squeeze
