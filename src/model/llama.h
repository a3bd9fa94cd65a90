// The llama architecture family (Llama 2/3, SmolLM2, Mistral-style): hyperparameters,
// tensor manifest and forward pass.
#pragma once

#include <span>

#include "model/batch.h"
#include "model/context.h"

namespace squeeze::model {

// Reads llama.* hyperparameters and binds every tensor of the manifest. Throws FormatError.
void load_llama(Model& m);

struct ForwardArgs {
  std::span<const int32_t> tokens;  // one chunk, at most scratch.n_batch
  const ChunkLayout* layout = nullptr;  // the tokens' positions and sequences
  float* logits = nullptr;          // [logit_rows.size(), n_vocab]; nullptr: no head
  std::span<const int32_t> logit_rows;  // rows of the chunk whose logits are wanted, ascending
  const TensorCallback* callback = nullptr;
};

void forward_llama(const Model& m, kv::KvCache& kv, ForwardScratch& s, ThreadPool& pool,
                   const ForwardArgs& args);

// The pieces of forward_llama, for callers that run the blocks one at a time (calibration):
// x[t * n_embd ..] = the embedding row of tokens[t].
void embed_llama(const Model& m, std::span<const int32_t> tokens, float* x);
// Block `il` on the residual stream s.x ([b.n, n_embd], updated in place) for the tokens of
// layout b, writing their K and V into kv's layer il.
void forward_llama_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                         ThreadPool& pool, const ChunkLayout& b, const TensorCallback* callback);
// The same for n tokens of sequence 0 at positions pos0..
void forward_llama_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                         ThreadPool& pool, int64_t n, int64_t pos0,
                         const TensorCallback* callback);

}  // namespace squeeze::model
