// attention_probs against a double-precision softmax of the same products: GQA groups, a
// sliding window, weights (zero ones skipped), paged cells out of order, sums added to, and
// Keyformer's Gumbel softmax (noise on the logits, a temperature).
#include "ops/attention_probs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/fp16.h"

namespace squeeze::ops {
namespace {

TEST(AttentionProbs, GumbelNoiseIsStandardGumbel) {
  // Mean: the Euler-Mascheroni constant; variance pi^2 / 6; different for each argument.
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double g = gumbel_noise(1, i, i % 7, i / 3);
    sum += g;
    sq += g * g;
  }
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.5772, 0.01);
  EXPECT_NEAR(sq / n - mean * mean, 1.6449, 0.03);
  EXPECT_NE(gumbel_noise(1, 2, 3, 4), gumbel_noise(1, 2, 3, 5));
  EXPECT_EQ(gumbel_noise(1, 2, 3, 4), gumbel_noise(1, 2, 3, 4));
}

TEST(AttentionProbs, EqualsASoftmaxInDouble) {
  // tau 0: the probabilities; 1.5: a fixed temperature; 1.5 rising 0.1 per position.
  for (const auto& [tau, tau_step] : {std::pair{0.0f, 0.0f}, std::pair{1.5f, 0.0f}, std::pair{1.5f, 0.1f}})
  for (const int64_t window : {int64_t{0}, int64_t{5}}) {
    const AttentionShape shape{4, 2, 16, 0.25f, window};
    const int64_t n_tok = 6, pos0 = 9, n = pos0 + n_tok, row = 2 * 16, stride = n + 3;
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0, 1);
    std::vector<f16_t> k(static_cast<size_t>(n * row)), v(k.size());
    for (f16_t& x : k) x = f32_to_f16(g(rng));
    std::vector<float> q(static_cast<size_t>(n_tok * 4 * 16));
    for (float& x : q) x = f16_to_f32(f32_to_f16(g(rng)));  // already half: no rounding to model
    std::vector<int32_t> cells(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) cells[j] = static_cast<int32_t>((j * 7) % n);  // a permutation
    const std::vector<float> w = {1, 0, 0.5f, 1, 2, 1};
    std::vector<float> acc(static_cast<size_t>(2 * stride), 1.0f);  // added to
    ThreadPool pool(2);
    std::vector<float> scratch;
    attention_probs(shape, q.data(), n_tok, pos0, KvView{k.data(), v.data(), row, cells},
                    {acc.data(), stride, w.data(), tau, tau_step, 42}, pool, scratch);
    std::vector<double> want(acc.size(), 1.0);
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int h = 0; h < 4; ++h) {
        const int hk = h / 2;
        const int64_t hi = pos0 + t, lo = window > 0 ? std::max<int64_t>(0, hi + 1 - window) : 0;
        std::vector<double> s;
        double mx = -1e30;
        for (int64_t j = lo; j <= hi; ++j) {
          double d = 0;
          for (int c = 0; c < 16; ++c) {
            d += static_cast<double>(q[(t * 4 + h) * 16 + c]) * f16_to_f32(k[cells[j] * row + hk * 16 + c]);
          }
          const double tau_t = tau + static_cast<double>(tau_step) * static_cast<double>(pos0 + t);
          s.push_back(tau > 0 ? (0.25 * d + gumbel_noise(42, pos0 + t, h, j)) / tau_t : 0.25 * d);
          mx = std::max(mx, s.back());
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t j = lo; j <= hi; ++j) want[hk * stride + j] += w[t] * s[j - lo] / sum;
      }
    }
    for (size_t i = 0; i < acc.size(); ++i) EXPECT_NEAR(acc[i], want[i], 1e-5) << i << " window " << window << " tau " << tau << " step " << tau_step;
  }
}

}  // namespace
}  // namespace squeeze::ops
