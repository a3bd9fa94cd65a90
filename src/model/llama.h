// The llama architecture family (Llama 2/3, SmolLM2, Mistral-style): hyperparameters,
// tensor manifest and forward pass.
#pragma once

#include <span>

#include "model/context.h"

namespace squeeze::model {

// Reads llama.* hyperparameters and binds every tensor of the manifest. Throws FormatError.
void load_llama(Model& m);

struct ForwardArgs {
  std::span<const int32_t> tokens;  // one chunk, at most scratch.n_batch
  int64_t pos0 = 0;                 // position of tokens[0]
  float* logits = nullptr;          // [n_tokens - logits_first, n_vocab]; nullptr: no head
  int64_t logits_first = 0;         // first row of the chunk whose logits are wanted
  const TensorCallback* callback = nullptr;
};

void forward_llama(const Model& m, kv::KvCache& kv, ForwardScratch& s, ThreadPool& pool,
                   const ForwardArgs& args);

// The pieces of forward_llama, for callers that run the blocks one at a time (calibration):
// x[t * n_embd ..] = the embedding row of tokens[t].
void embed_llama(const Model& m, std::span<const int32_t> tokens, float* x);
// Block `il` on the residual stream s.x ([n, n_embd], updated in place) for tokens at
// positions pos0.., writing their K and V into kv's layer il.
void forward_llama_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                         ThreadPool& pool, int64_t n, int64_t pos0,
                         const TensorCallback* callback);

}  // namespace squeeze::model
