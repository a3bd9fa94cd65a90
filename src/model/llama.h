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

void forward_llama(const Model& m, KvCache& kv, ForwardScratch& s, ThreadPool& pool,
                   const ForwardArgs& args);

}  // namespace squeeze::model
