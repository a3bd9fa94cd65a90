// Token sampling: repetition penalty, then top-k, top-p, min-p, temperature and a seeded
// draw, in the order of llama.cpp's default sampler chain (common_params_sampling::samplers:
// penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature; squeeze has no
// dry, top_n_sigma, typ_p or xtc). temp <= 0 means greedy (argmax after penalties).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

namespace squeeze::sample {

struct SamplerParams {
  float temp = 0.8f;
  int32_t top_k = 40;            // <= 0: off
  float top_p = 0.95f;           // >= 1: off
  float min_p = 0.05f;           // <= 0: off
  float repeat_penalty = 1.0f;   // 1: off
  int32_t repeat_last_n = 64;    // tokens the penalty looks back over
  uint64_t seed = 0;
};

// Checks ranges; throws UsageError naming the bad parameter.
void validate(const SamplerParams& p);

class Sampler {
 public:
  struct Candidate {
    int32_t id;
    float logit;  // after the repetition penalty
    float p;
  };

  Sampler(const SamplerParams& params, int32_t n_vocab);

  // The distribution the next draw is made from, for [n_vocab] logits: the tokens left by the
  // penalty and the cuts, by decreasing logit (ties by id), each with its probability after
  // temperature (they sum to 1). Greedy: the argmax alone, p = 1. Valid until the next call.
  std::span<const Candidate> distribution(std::span<const float> logits);
  // Draws the next token from distribution(logits). Does not record it: call accept().
  int32_t sample(std::span<const float> logits);
  // Records a token (prompt or generated) for the repetition penalty.
  void accept(int32_t token);
  void reset();

 private:
  SamplerParams params_;
  int32_t n_vocab_;
  std::vector<Candidate> cand_;  // [n_vocab], reused per call
  std::deque<int32_t> recent_;   // last repeat_last_n accepted tokens
  uint64_t rng_state_;
  double next_uniform();         // in [0, 1)
};

}  // namespace squeeze::sample
