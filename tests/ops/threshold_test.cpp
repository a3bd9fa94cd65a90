// threshold_indices: the AVX2 twin equals the scalar one (values zeroed, indices, count) on
// lengths with and without a tail, with zeros, signed zeros, ties at t and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "ops/threshold.h"

namespace squeeze::ops {
namespace {

TEST(Threshold, Avx2EqualsScalar) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n01;
  for (int64_t n : {1, 7, 8, 9, 64, 576, 1539}) {
    std::vector<float> x(n);
    for (auto& v : x) v = n01(rng);
    x[0] = 0.5f;                    // exactly t: kept
    if (n > 3) x[3] = -0.5f;        // exactly -t: kept
    if (n > 5) x[5] = -0.0f;
    if (n > 6) x[6] = std::nanf("");  // kept
    std::vector<float> a = x, b = x;
    std::vector<int32_t> ia(n), ib(n);
    const int64_t ka = threshold_indices_scalar(a.data(), n, 0.5f, ia.data());
    const int64_t kb = threshold_indices_avx2(b.data(), n, 0.5f, ib.data());
    ASSERT_EQ(ka, kb) << n;
    for (int64_t i = 0; i < ka; ++i) ASSERT_EQ(ia[i], ib[i]) << n;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::isnan(a[i]), std::isnan(b[i]));
      if (!std::isnan(a[i])) {
        ASSERT_EQ(a[i], b[i]) << n << " at " << i;
      }
      if (std::fabs(x[i]) < 0.5f) {
        ASSERT_EQ(a[i], 0.0f);
      } else {
        ASSERT_TRUE(a[i] == x[i] || std::isnan(x[i]));
      }
    }
    int64_t expect = 0;
    for (float v : x) expect += !(std::fabs(v) < 0.5f);
    EXPECT_EQ(ka, expect);
  }
}

}  // namespace
}  // namespace squeeze::ops
