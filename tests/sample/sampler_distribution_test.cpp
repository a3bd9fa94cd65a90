// Each stage of the sampler against the distribution it must produce, written out by hand in
// the test (logits that are logs of small weights, so the expected probabilities are simple
// fractions), two ways: Sampler::distribution() exactly (to float rounding), and the tokens
// sample() draws for 20000 seeds against those probabilities by a chi-square test. The stages
// and their order are llama.cpp's default chain: repetition penalty, top-k, top-p, min-p,
// temperature, then the draw.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "sample/sampler.h"

namespace squeeze::sample {
namespace {

constexpr int kDraws = 20000;  // one draw per seed 0..kDraws-1

// Every stage off, temperature 1: plain softmax sampling.
SamplerParams plain() {
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  return p;
}

std::vector<float> log_weights(const std::vector<double>& w) {
  std::vector<float> l;
  for (double x : w) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

// Normalizes weights into probabilities (zeros stay zero: tokens the stages cut).
std::vector<double> normalized(std::vector<double> w) {
  double sum = 0;
  for (double x : w) sum += x;
  for (double& x : w) x /= sum;
  return w;
}

// Upper quantile of the chi-square distribution with `df` degrees of freedom at standard normal
// deviate z (Wilson-Hilferty; above the exact quantile for df >= 1 at z = 6, so the bound is
// conservative). z = 6: a correct sampler exceeds it with probability below 1e-9.
double chi_square_bound(int df, double z = 6.0) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// distribution(logits) equals `expect` (over the whole vocabulary, zeros for cut tokens), and
// the tokens drawn for kDraws seeds follow it: no draw of a cut token, and Pearson's statistic
// over the kept tokens under chi_square_bound.
void expect_distribution(const SamplerParams& base, const std::vector<float>& logits,
                         const std::vector<double>& expect, const std::vector<int32_t>& accepted = {}) {
  const int32_t n_vocab = static_cast<int32_t>(logits.size());
  ASSERT_EQ(expect.size(), logits.size());
  {
    Sampler s(base, n_vocab);
    for (int32_t t : accepted) s.accept(t);
    std::vector<double> got(n_vocab, 0.0);
    for (const Sampler::Candidate& c : s.distribution(logits)) got[c.id] += c.p;
    for (int32_t i = 0; i < n_vocab; ++i) {
      EXPECT_NEAR(got[i], expect[i], 2e-6) << "token " << i;
    }
  }
  std::vector<int64_t> count(n_vocab, 0);
  SamplerParams p = base;
  for (int seed = 0; seed < kDraws; ++seed) {
    p.seed = static_cast<uint64_t>(seed);
    Sampler s(p, n_vocab);
    for (int32_t t : accepted) s.accept(t);
    ++count[s.sample(logits)];
  }
  double chi2 = 0;
  int kept = 0;
  for (int32_t i = 0; i < n_vocab; ++i) {
    if (expect[i] == 0.0) {
      EXPECT_EQ(count[i], 0) << "token " << i << " was cut but drawn";
      continue;
    }
    const double e = expect[i] * kDraws;
    chi2 += (count[i] - e) * (count[i] - e) / e;
    ++kept;
  }
  if (kept < 2) return;  // one kept token: every draw must be it, checked above
  const double bound = chi_square_bound(kept - 1);
  EXPECT_LT(chi2, bound) << "chi-square over " << kept << " tokens";
  std::printf("  chi-square %.2f (df %d, bound %.1f)\n", chi2, kept - 1, bound);
}

TEST(SamplerStages, TemperatureDividesTheLogits) {
  // Weights 4, 64, 1, 16: temperature T gives probabilities proportional to w^(1/T).
  const std::vector<float> l = log_weights({4, 64, 1, 16});
  SamplerParams p = plain();
  p.temp = 2.0f;  // square roots 2, 8, 1, 4
  expect_distribution(p, l, normalized({2, 8, 1, 4}));
  p.temp = 0.5f;  // squares
  expect_distribution(p, l, normalized({16, 4096, 1, 256}));
}

TEST(SamplerStages, TopKKeepsTheKBest) {
  const std::vector<float> l = log_weights({1, 4, 2, 3, 0.5});
  SamplerParams p = plain();
  p.top_k = 2;  // tokens 1 and 3
  expect_distribution(p, l, normalized({0, 4, 0, 3, 0}));
  p.top_k = 3;  // tokens 1, 3 and 2, then temperature 2: square roots
  p.temp = 2.0f;
  expect_distribution(p, l, normalized({0, 2, std::sqrt(2.0), std::sqrt(3.0), 0}));
}

TEST(SamplerStages, TopPKeepsTheSmallestPrefixReachingP) {
  // Sorted: 0.4 (token 1), 0.3 (token 3), 0.2 (token 2), 0.1 (token 0).
  const std::vector<float> l = log_weights({0.1, 0.4, 0.2, 0.3});
  SamplerParams p = plain();
  p.top_p = 0.6f;  // 0.4 < 0.6 <= 0.7: two tokens
  expect_distribution(p, l, normalized({0, 4, 0, 3}));
  p.top_p = 0.75f;  // 0.7 < 0.75 <= 0.9: three
  expect_distribution(p, l, normalized({0, 4, 2, 3}));
}

TEST(SamplerStages, MinPDropsTokensBelowAFractionOfTheBest) {
  const std::vector<float> l = log_weights({0.05, 0.5, 0.15, 0.3});
  SamplerParams p = plain();
  p.min_p = 0.25f;  // cut at 0.125: 0.05 goes
  expect_distribution(p, l, normalized({0, 0.5, 0.15, 0.3}));
  p.min_p = 0.5f;  // cut at 0.25: 0.15 goes too
  expect_distribution(p, l, normalized({0, 0.5, 0, 0.3}));
}

TEST(SamplerStages, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  // Penalty 2 on tokens 0 (logit 2 -> 1) and 2 (logit -1 -> -2); token 2 seen twice, counted once.
  const std::vector<float> l = {2.0f, 1.0f, -1.0f, 0.5f, 0.0f};
  SamplerParams p = plain();
  p.repeat_penalty = 2.0f;
  const auto e = [](double x) { return std::exp(x); };
  expect_distribution(p, l, normalized({e(1), e(1), e(-2), e(0.5), e(0)}), {0, 2, 2});
  // Only the last repeat_last_n accepted tokens count: here the two 2s, not the 0.
  p.repeat_last_n = 2;
  expect_distribution(p, l, normalized({e(2), e(1), e(-2), e(0.5), e(0)}), {0, 2, 2});
}

// The order matters in each of these; the other orders give other distributions.
TEST(SamplerStages, StagesRunInLlamaCppOrder) {
  SamplerParams p = plain();
  // Penalty before top-k: token 0 (3 -> 1.5) falls out of the top 2.
  p.repeat_penalty = 2.0f;
  p.top_k = 2;
  expect_distribution(p, {3.0f, 2.5f, 2.0f, -1.0f},
                      normalized({0, std::exp(2.5), std::exp(2.0), 0}), {0});
  // top-k before top-p: top-p sees the 3 best renormalized (0.44, 0.33, 0.22) and keeps two;
  // over the whole vocabulary (0.4, 0.3, 0.2, 0.1) it would keep three.
  p = plain();
  p.top_k = 3;
  p.top_p = 0.75f;
  expect_distribution(p, log_weights({0.4, 0.3, 0.2, 0.1}), normalized({4, 3, 0, 0}));
  // top-p before temperature: at temperature 4 the tempered probabilities (0.29, 0.27, 0.24,
  // 0.20) would need three tokens to reach 0.6; untempered two do.
  p = plain();
  p.top_p = 0.6f;
  p.temp = 4.0f;
  expect_distribution(p, log_weights({0.4, 0.3, 0.2, 0.1}),
                      normalized({std::pow(0.4, 0.25), std::pow(0.3, 0.25), 0, 0}));
  // min-p before temperature: untempered 0.05 / 0.5 = 0.1 < 0.25 is cut; tempered, the ratio
  // 0.1^(1/4) = 0.56 would pass.
  p = plain();
  p.min_p = 0.25f;
  p.temp = 4.0f;
  expect_distribution(p, log_weights({0.5, 0.3, 0.15, 0.05}),
                      normalized({std::pow(0.5, 0.25), std::pow(0.3, 0.25), std::pow(0.15, 0.25), 0}));
}

TEST(SamplerStages, WholeChain) {
  // Weights 64, 32, 16, 4, 2, 1 (logits their logs). Penalty 2 on token 0: logit ln 64 -> ln 8.
  // top-k 5 drops token 5. Over 32+16+8+4+2 = 62, top-p 0.95 keeps 32, 16, 8, 4 (cumulative
  // 0.90 < 0.95 <= 0.97). min-p 0.2 cuts at 0.2 * 32/62: 4/62 goes. Temperature 2: square
  // roots of 32, 16, 8, i.e. proportional to 2, sqrt 2, 1.
  SamplerParams p;
  p.repeat_penalty = 2.0f;
  p.top_k = 5;
  p.top_p = 0.95f;
  p.min_p = 0.2f;
  p.temp = 2.0f;
  expect_distribution(p, log_weights({64, 32, 16, 4, 2, 1}),
                      normalized({1, 2, std::sqrt(2.0), 0, 0, 0}), {0});
}

}  // namespace
}  // namespace squeeze::sample
