// Passkey retrieval (Landmark Attention, Mohtashami & Jaggi 2023): a random 5-digit key hidden
// at a depth of filler text that fills the context; the model, asked for it, must answer it
// greedily. Accuracy over depths x trials measures whether long-range retrieval survives a
// compressed KV cache (quantized, evicted) or pruned prefill.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/context.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::eval {

struct PasskeyOptions {
  int depths = 10;       // key positions 0, 1/(depths-1), ..., 1 of the filler (one: 0.5)
  int trials = 1;        // keys per depth
  uint64_t seed = 1;     // the keys (mt19937_64)
  int64_t n_answer = 8;  // tokens decoded greedily after the question
};

struct PasskeyTrial {
  double depth = 0;
  int key = 0;
  int64_t n_prompt = 0;  // prompt tokens
  std::string answer;
  bool correct = false;
};

// The prompt of a key at `depth` (0: first, 1: last) of filler sentences, as many as fit in
// max_tokens tokens. Throws UsageError when not even the key and question fit.
std::vector<int32_t> passkey_prompt(const tokenizer::Tokenizer& tok, int key, double depth,
                                    int64_t max_tokens);
// Whether the answer's first run of digits is the key.
bool answer_has_key(const std::string& answer, int key);
// The depths of the options, in order.
std::vector<double> passkey_depths(const PasskeyOptions& o);
// One trial on ctx (reset first): prompt, then greedy decoding of up to n_answer tokens.
PasskeyTrial run_passkey_trial(model::Context& ctx, const tokenizer::Tokenizer& tok, int key,
                               double depth, int64_t n_answer);

}  // namespace squeeze::eval
