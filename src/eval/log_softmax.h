// Log-softmax of one row of logits, computed as llama.cpp's perplexity tool computes it:
// max in float, sum of expf(logit - max) in double, log-probabilities in double.
#pragma once

#include <cmath>
#include <cstdint>

namespace squeeze::eval {

struct RowSoftmax {
  float max_logit = 0.0f;
  int32_t argmax = 0;        // first index of the maximum
  double log_sum_exp = 0.0;  // log sum_i exp(logit_i - max_logit)

  // log p(i) = (logit_i - max) - log_sum_exp
  double log_prob(const float* logits, int64_t i) const {
    return static_cast<double>(logits[i] - max_logit) - log_sum_exp;
  }
};

inline RowSoftmax row_softmax(const float* logits, int64_t n_vocab) {
  RowSoftmax r;
  r.max_logit = logits[0];
  for (int64_t i = 1; i < n_vocab; ++i) {
    if (logits[i] > r.max_logit) {
      r.max_logit = logits[i];
      r.argmax = static_cast<int32_t>(i);
    }
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(logits[i] - r.max_logit);  // float exp
  r.log_sum_exp = std::log(sum);
  return r;
}

}  // namespace squeeze::eval
