// Token sampling: penalties (repetition, frequency, presence), then top-k, top-p, min-p,
// temperature and a seeded draw, in the order of llama.cpp's default sampler chain
// (common_params_sampling::samplers: penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p,
// xtc, temperature; squeeze has no dry, top_n_sigma, typ_p or xtc). temp <= 0 means greedy
// (argmax after the penalties).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

namespace squeeze::sample {

struct SamplerParams {
  float temp = 0.8f;
  int32_t top_k = 40;              // <= 0: off
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.05f;             // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off
  float frequency_penalty = 0.0f;  // [-2, 2], times a token's count in the window; 0: off
  float presence_penalty = 0.0f;   // [-2, 2], once for a token in the window; 0: off
  int32_t repeat_last_n = 64;      // the window: last accepted tokens the penalties look at
  uint64_t seed = 0;
};

// Checks ranges; throws UsageError naming the bad parameter.
void validate(const SamplerParams& p);

class Sampler {
 public:
  struct Candidate {
    int32_t id;
    float logit;  // after the penalties
    float p;
  };

  Sampler(const SamplerParams& params, int32_t n_vocab);

  // The distribution the next draw is made from, for [n_vocab] logits: the tokens left by the
  // penalties and the cuts, by decreasing logit (ties by id), each with its probability after
  // temperature (they sum to 1). Greedy: the argmax alone, p = 1. Valid until the next call.
  std::span<const Candidate> distribution(std::span<const float> logits);
  // Draws the next token from distribution(logits). Does not record it: call accept().
  int32_t sample(std::span<const float> logits);
  // Records a token (prompt or generated) for the penalties.
  void accept(int32_t token);
  void reset();

 private:
  SamplerParams params_;
  int32_t n_vocab_;
  std::vector<Candidate> cand_;  // [n_vocab], reused per call
  std::deque<int32_t> recent_;   // last repeat_last_n accepted tokens
  std::vector<int32_t> sorted_;  // [<= repeat_last_n] recent_ sorted, reused per call
  uint64_t rng_state_;
  double next_uniform();   // in [0, 1)
  void apply_penalties();  // to cand_[*].logit
};

}  // namespace squeeze::sample
