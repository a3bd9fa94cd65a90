#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"

namespace squeeze {
namespace {

TEST(ThreadPool, EveryChunkRunsOnceOnAValidThread) {
  for (int n : {1, 2, 3, 5}) {
    ThreadPool pool(n);
    for (int64_t chunks : {1, 2, 7, 100}) {
      std::vector<std::atomic<int>> hits(chunks);
      pool.run_chunks(chunks, [&](int64_t c, int ith) {
        EXPECT_GE(ith, 0);
        EXPECT_LT(ith, n);
        hits[c].fetch_add(1);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
    for (int64_t total : {0, 1, 7, 100, 1001}) {
      std::vector<int> hits(total, 0);
      pool.parallel_for(total, 4, [&](int64_t b, int64_t e, int) {
        EXPECT_EQ(b % 4, 0);
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int h : hits) ASSERT_EQ(h, 1);
    }
  }
}

TEST(ThreadPool, ManyRegionsBackToBack) {
  // More regions than the 16-bit generation counter holds, to cover its wrap-around.
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 70000; ++r) {
    pool.run_chunks(3, [&](int64_t c, int) { sum.fetch_add(c + 1); });
  }
  EXPECT_EQ(sum.load(), int64_t{70000} * 6);
}

TEST(Fp16, RoundTripsAndSpecialValues) {
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f)), 1.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(-2.5f)), -2.5f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(5.9604645e-8f)), 5.9604645e-8f);  // smallest subnormal
  // Every half value converts to float and back to itself (NaNs excepted).
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<f16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h);
  }
  // Round to nearest even at the midpoint between 1 and 1 + 2^-10.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), f32_to_f16(1.0f));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.5f)), 1.5f);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), f32_to_bf16(1.0f));  // ties to even
}

}  // namespace
}  // namespace squeeze
