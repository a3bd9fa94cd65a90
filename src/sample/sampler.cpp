#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace squeeze::sample {

void validate(const SamplerParams& p) {
  if (!(p.temp >= 0.0f) || !std::isfinite(p.temp)) throw UsageError("--temp must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) throw UsageError("--top-p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p < 1.0f)) throw UsageError("--min-p must be in [0, 1)");
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) {
    throw UsageError("--repeat-penalty must be > 0");
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    throw UsageError("--frequency-penalty must be in [-2, 2]");
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    throw UsageError("--presence-penalty must be in [-2, 2]");
  }
  if (p.repeat_last_n < 0) throw UsageError("--repeat-last-n must be >= 0");
}

Sampler::Sampler(const SamplerParams& params, int32_t n_vocab)
    : params_(params), n_vocab_(n_vocab), cand_(n_vocab) {
  validate(params_);
  reset();
}

void Sampler::reset() {
  recent_.clear();
  // splitmix64 seeding of a xorshift-style state: same seed, same stream, on every platform.
  rng_state_ = params_.seed + 0x9E3779B97F4A7C15ull;
}

double Sampler::next_uniform() {
  // splitmix64
  uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

void Sampler::accept(int32_t token) {
  if (params_.repeat_last_n == 0) return;
  recent_.push_back(token);
  while (static_cast<int32_t>(recent_.size()) > params_.repeat_last_n) recent_.pop_front();
}

// llama.cpp's penalties sampler (llama_sampler_penalties_apply): for each distinct token with
// count c > 0 in the window, the repetition penalty (CTRL-style: divides a positive logit,
// multiplies a negative one), then logit -= c * frequency_penalty + presence_penalty.
void Sampler::apply_penalties() {
  const bool repeat = params_.repeat_penalty != 1.0f;
  const bool additive = params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f;
  if (!repeat && !additive) return;
  sorted_.assign(recent_.begin(), recent_.end());
  std::sort(sorted_.begin(), sorted_.end());
  for (size_t i = 0; i < sorted_.size();) {
    const int32_t t = sorted_[i];
    size_t end = i + 1;
    while (end < sorted_.size() && sorted_[end] == t) ++end;
    const auto count = static_cast<float>(end - i);
    i = end;
    if (t < 0 || t >= n_vocab_) continue;
    float& l = cand_[t].logit;
    if (repeat) l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    if (additive) l -= count * params_.frequency_penalty + params_.presence_penalty;
  }
}

std::span<const Sampler::Candidate> Sampler::distribution(std::span<const float> logits) {
  if (static_cast<int32_t>(logits.size()) < n_vocab_) throw Error("sampler: too few logits");
  for (int32_t i = 0; i < n_vocab_; ++i) cand_[i] = {i, logits[i], 0.0f};

  apply_penalties();

  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  if (params_.temp <= 0.0f) {
    auto best = std::min_element(cand_.begin(), cand_.end(), by_logit);
    std::iter_swap(cand_.begin(), best);
    cand_[0].p = 1.0f;
    return {cand_.data(), 1};
  }

  // top-k: keep the k best, sorted.
  size_t n = cand_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    n = static_cast<size_t>(params_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + n, cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }

  // Probabilities of the survivors (untempered, as llama.cpp's top-p and min-p see them).
  auto softmax = [&](float temp) {
    const float max = cand_[0].logit;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      cand_[i].p = std::exp((cand_[i].logit - max) / temp);
      sum += cand_[i].p;
    }
    for (size_t i = 0; i < n; ++i) cand_[i].p = static_cast<float>(cand_[i].p / sum);
  };
  softmax(1.0f);

  // top-p: smallest prefix whose mass reaches p.
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      cum += cand_[i].p;
      if (cum >= params_.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  // min-p: drop tokens below min_p times the best probability.
  if (params_.min_p > 0.0f) {
    const float cut = cand_[0].p * params_.min_p;
    size_t keep = 1;
    while (keep < n && cand_[keep].p >= cut) ++keep;
    n = keep;
  }

  softmax(params_.temp);
  return {cand_.data(), n};
}

int32_t Sampler::sample(std::span<const float> logits) {
  const std::span<const Candidate> dist = distribution(logits);
  if (params_.temp <= 0.0f) return dist[0].id;  // greedy: no draw
  const double u = next_uniform();
  double cum = 0.0;
  for (const Candidate& c : dist) {
    cum += c.p;
    if (u < cum) return c.id;
  }
  return dist.back().id;
}

}  // namespace squeeze::sample
