// The llama architecture (Llama 2/3, SmolLM2, Mistral-style): hyperparameters, tensor manifest
// and the forward pass of a layer, as an entry of the architecture table; its loader and layer
// are shared by the family's variants (model/qwen.h).
#pragma once

#include "model/arch.h"

namespace squeeze::model {

extern const Arch kLlamaArch;

// The llama family's loader: the llama keys and the seven matrices per layer, q/k/v biases
// and rope_freqs (Llama 3.1+) where the file has them, per-head QK-norm weights when qk_norm.
void load_llama_family(const gguf::File& f, HParams& hp, Model& m, ops::RopeLayout rope,
                       bool qk_norm);
// The layer of the llama family (llama, qwen2, qwen3, qwen3moe): pre-norm attention and SwiGLU
// MLP, with q/k/v biases, per-head QK-norm and routed experts where the layer's weights have
// them.
void llama_family_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                        ThreadPool& pool, const ChunkLayout& b, const TensorCallback* callback);

}  // namespace squeeze::model
