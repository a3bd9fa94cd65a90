// Seeded random test data.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace squeeze::testing {

// n normal samples with standard deviation `scale`, reproducible from `seed`.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace squeeze::testing
