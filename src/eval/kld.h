// KL divergence of a model from a base model's saved distribution, top-1 agreement, Δp of the
// correct token, and both perplexities; statistics as llama.cpp's perplexity tool reports them.
#pragma once

#include <cstdint>
#include <vector>

#include "eval/logits_file.h"

namespace squeeze::eval {

// One scored position compared with the base row.
struct KldRow {
  double kld = 0.0;        // KL(base || model) over the tokens the base row stores
  float p_diff = 0.0f;     // p_model(correct) - p_base(correct)
  bool same_top = false;   // same argmax
  double nll = 0.0;        // -log p_model(correct)
  double nll_base = 0.0;   // -log p_base(correct)
};

// Both sides' log-probabilities go through the same 16-bit grid (logprob_code), so a model
// compared with its own saved logits gives exactly 0.
KldRow compare_row(const float* logits, int64_t n_vocab, int32_t target, const LogitsRow& base);

// mean and standard error of the mean (llama.cpp's mean_and_uncertainty)
struct Estimate {
  double value = 0.0;
  double error = 0.0;
};

struct KldReport {
  int64_t count = 0;                  // scored positions
  Estimate kld;                       // mean KL divergence
  double kld_median = 0.0, kld_p90 = 0.0, kld_p99 = 0.0, kld_p999 = 0.0, kld_max = 0.0;
  Estimate top1;                      // fraction of positions with the same argmax
  Estimate rms_p_diff;                // RMS of Δp of the correct token
  Estimate ppl, ppl_base, ppl_ratio;  // PPL(model), PPL(base), PPL(model) / PPL(base)
};

class KldStats {
 public:
  void add(const KldRow& r);
  int64_t count() const { return count_; }
  double mean_kld() const { return count_ ? sum_kld_ / count_ : 0.0; }
  double top1() const { return count_ ? static_cast<double>(n_same_top_) / count_ : 0.0; }
  KldReport report() const;

 private:
  double sum_nll_ = 0, sum_nll2_ = 0, sum_nll_base_ = 0, sum_nll_base2_ = 0, sum_nll_nll_base_ = 0;
  double sum_kld_ = 0, sum_kld2_ = 0, sum_p_diff2_ = 0, sum_p_diff4_ = 0;
  int64_t n_same_top_ = 0, count_ = 0;
  std::vector<float> kld_values_;
};

}  // namespace squeeze::eval
