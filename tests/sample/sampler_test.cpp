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

// The logit of each token after the penalties, by id, for logits_example() with every cut off
// and the tokens `accepted` recorded first.
std::vector<float> penalized(SamplerParams p, const std::vector<int32_t>& accepted) {
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  Sampler s(p, 6);
  for (int32_t t : accepted) s.accept(t);
  std::vector<float> out(6, NAN);
  for (const Sampler::Candidate& c : s.distribution(logits_example())) out[c.id] = c.logit;
  return out;
}

TEST(Sampler, FrequencyPenaltyScalesWithTheCount) {
  SamplerParams p;
  p.frequency_penalty = 0.5f;
  // 1 twice: 3.0 - 2 * 0.5; 3 once: -1.0 - 0.5; the others untouched.
  const std::vector<float> expect = {1.0f, 2.0f, 2.5f, -1.5f, 0.0f, 2.9f};
  EXPECT_EQ(penalized(p, {1, 3, 1}), expect);
}

TEST(Sampler, PresencePenaltyOncePerToken) {
  SamplerParams p;
  p.presence_penalty = 0.75f;
  // 1 twice and 4 once: each 0.75 lower, whatever the count.
  const std::vector<float> expect = {1.0f, 2.25f, 2.5f, -1.0f, -0.75f, 2.9f};
  EXPECT_EQ(penalized(p, {1, 4, 1}), expect);
  p.presence_penalty = -0.5f;  // negative: favours the tokens seen
  EXPECT_EQ(penalized(p, {2})[2], 3.0f);
}

TEST(Sampler, PenaltiesInLlamaCppOrder) {
  SamplerParams p;
  p.repeat_penalty = 2.0f;
  p.frequency_penalty = 0.25f;
  p.presence_penalty = 0.5f;
  // Repetition first, then the additive ones: 1 (3.0, twice) -> 1.5 - 0.5 - 0.5;
  // 3 (-1.0, once) -> -2.0 - 0.25 - 0.5. (The other way round 1 would be (3.0 - 1.0) / 2.)
  const std::vector<float> expect = {1.0f, 0.5f, 2.5f, -2.75f, 0.0f, 2.9f};
  EXPECT_EQ(penalized(p, {1, 3, 1}), expect);
}

TEST(Sampler, PenaltiesLookOnlyAtTheWindow) {
  SamplerParams p;
  p.frequency_penalty = 1.0f;
  p.repeat_last_n = 2;
  // 1 left the window of the last 2 tokens (2, 2).
  const std::vector<float> expect = {1.0f, 3.0f, 0.5f, -1.0f, 0.0f, 2.9f};
  EXPECT_EQ(penalized(p, {1, 1, 2, 2}), expect);
  p.repeat_last_n = 0;  // no window: no penalty
  EXPECT_EQ(penalized(p, {1, 1, 2, 2}), logits_example());
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
  p = {};
  p.frequency_penalty = 2.5f;
  EXPECT_THROW(validate(p), UsageError);
  p = {};
  p.presence_penalty = -2.01f;
  EXPECT_THROW(validate(p), UsageError);
  p = {};
  p.frequency_penalty = NAN;
  EXPECT_THROW(validate(p), UsageError);
  p = {};
  p.frequency_penalty = -2.0f;
  p.presence_penalty = 2.0f;
  EXPECT_NO_THROW(validate(p));
}

}  // namespace
}  // namespace squeeze::sample
