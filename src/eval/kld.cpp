#include "eval/kld.h"

#include <algorithm>
#include <cmath>

#include "eval/log_softmax.h"

namespace squeeze::eval {

KldRow compare_row(const float* logits, int64_t n_vocab, int32_t target, const LogitsRow& base) {
  const RowSoftmax s = row_softmax(logits, n_vocab);
  KldRow r;
  // NLLs in float on both sides, as llama.cpp's KL divergence has them (and as the base side is
  // stored), so a model against its own logits gives exactly the same PPL and Δp = 0.
  const float nll = static_cast<float>(-s.log_prob(logits, target));
  r.nll = nll;
  r.nll_base = base.nll;
  r.same_top = s.argmax == base.argmax;
  r.p_diff = std::exp(-nll) - std::exp(-base.nll);
  double kld = 0.0;
  size_t k = 0;
  for (int64_t byte = 0; byte < static_cast<int64_t>(base.present.size()); ++byte) {
    for (unsigned bits = base.present[byte]; bits != 0; bits &= bits - 1) {
      const int64_t i = byte * 8 + __builtin_ctz(bits);
      const double lb = code_logprob(base.codes[k++]);
      double lq = s.log_prob(logits, i);
      if (lq > kLogProbFloor) lq = code_logprob(logprob_code(lq));
      kld += std::exp(lb) * (lb - lq);
    }
  }
  r.kld = kld;
  return r;
}

void KldStats::add(const KldRow& r) {
  sum_nll_ += r.nll;
  sum_nll2_ += r.nll * r.nll;
  sum_nll_base_ += r.nll_base;
  sum_nll_base2_ += r.nll_base * r.nll_base;
  sum_nll_nll_base_ += r.nll * r.nll_base;
  sum_kld_ += r.kld;
  sum_kld2_ += r.kld * r.kld;
  const double d2 = static_cast<double>(r.p_diff) * r.p_diff;
  sum_p_diff2_ += d2;
  sum_p_diff4_ += d2 * d2;
  n_same_top_ += r.same_top ? 1 : 0;
  ++count_;
  kld_values_.push_back(static_cast<float>(r.kld));
}

namespace {

Estimate mean_and_error(double sum, double sum2, int64_t n) {
  if (n < 1) return {};
  const double mean = sum / n;
  const double var = sum2 / n - mean * mean;
  return {mean, var > 0 && n > 10 ? std::sqrt(var / (n - 1)) : 0.0};
}

// Linear interpolation between the two nearest sorted values (llama.cpp's percentile).
double percentile(const std::vector<float>& sorted, double fraction) {
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  double p = fraction * static_cast<double>(sorted.size() - 1);
  const size_t ip = static_cast<size_t>(p);
  p -= static_cast<double>(ip);
  return (1 - p) * sorted[ip] + p * sorted[std::min(ip + 1, sorted.size() - 1)];
}

}  // namespace

KldReport KldStats::report() const {
  KldReport r;
  r.count = count_;
  if (count_ == 0) return r;
  const Estimate lp = mean_and_error(sum_nll_, sum_nll2_, count_);
  const Estimate lb = mean_and_error(sum_nll_base_, sum_nll_base2_, count_);
  r.ppl = {std::exp(lp.value), std::exp(lp.value) * lp.error};
  r.ppl_base = {std::exp(lb.value), std::exp(lb.value) * lb.error};
  double cov = 0.0;
  if (count_ >= 10) {
    cov = (sum_nll_nll_base_ / count_ - (sum_nll_ / count_) * (sum_nll_base_ / count_)) /
          static_cast<double>(count_ - 1);
  }
  const double ln_ratio = lp.value - lb.value;
  const double ln_ratio_err =
      std::sqrt(std::max(0.0, lp.error * lp.error + lb.error * lb.error - 2 * cov));
  r.ppl_ratio = {std::exp(ln_ratio), std::exp(ln_ratio) * ln_ratio_err};

  r.kld = mean_and_error(sum_kld_, sum_kld2_, count_);
  std::vector<float> sorted = kld_values_;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  r.kld_median = n % 2 == 0 ? 0.5 * (sorted[n / 2] + sorted[n / 2 - 1]) : sorted[n / 2];
  r.kld_p90 = percentile(sorted, 0.90);
  r.kld_p99 = percentile(sorted, 0.99);
  r.kld_p999 = percentile(sorted, 0.999);
  r.kld_max = sorted.back();

  const double top = top1();
  r.top1 = {top, count_ > 1 ? std::sqrt(top * (1 - top) / static_cast<double>(count_ - 1)) : 0.0};
  const Estimate mse = mean_and_error(sum_p_diff2_, sum_p_diff4_, count_);
  const double rms = std::sqrt(mse.value);
  r.rms_p_diff = {rms, rms > 0 ? 0.5 / rms * mse.error : 0.0};
  return r;
}

}  // namespace squeeze::eval
