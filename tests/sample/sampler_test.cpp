// The sampler's greedy path, seeding and parameter checks; each stage's distribution is in
// sampler_distribution_test.cpp.
#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"

namespace squeeze::sample {
namespace {

std::vector<float> logits_example() { return {1.0f, 3.0f, 2.5f, -1.0f, 0.0f, 2.9f}; }

TEST(Sampler, GreedyIsArgmax) {
  SamplerParams p;
  p.temp = 0.0f;
  Sampler s(p, 6);
  EXPECT_EQ(s.sample(logits_example()), 1);
}

TEST(Sampler, TopKOneIsArgmaxAtAnyTemperature) {
  SamplerParams p;
  p.temp = 5.0f;
  p.top_k = 1;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    p.seed = seed;
    Sampler s(p, 6);
    EXPECT_EQ(s.sample(logits_example()), 1);
  }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  SamplerParams p;
  p.temp = 1.5f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  std::vector<float> flat(50, 0.0f);
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p, 50);
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) out.push_back(s.sample(flat));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, RepeatPenaltyDemotesRecentTokens) {
  SamplerParams p;
  p.temp = 0.0f;
  p.repeat_penalty = 2.0f;
  Sampler s(p, 6);
  s.accept(1);  // logit 3.0 -> 1.5, so 5 (2.9) wins
  EXPECT_EQ(s.sample(logits_example()), 5);
  s.accept(5);
  s.accept(5);  // counted once: 2.9 -> 1.45, so 2 (2.5) wins
  EXPECT_EQ(s.sample(logits_example()), 2);
  s.reset();
  EXPECT_EQ(s.sample(logits_example()), 1);
}

TEST(Sampler, RejectsBadParameters) {
  SamplerParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(validate(p), UsageError);
  p = {};
  p.temp = -1.0f;
  EXPECT_THROW(validate(p), UsageError);
  p = {};
  p.min_p = 1.0f;
  EXPECT_THROW(validate(p), UsageError);
  p = {};
  p.repeat_penalty = 0.0f;
  EXPECT_THROW(validate(p), UsageError);
}

}  // namespace
}  // namespace squeeze::sample
