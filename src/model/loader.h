// What architecture loaders share (model/arch.h): binding tensors with their shapes checked,
// reading the hyperparameters every transformer family names the same way, the embedding and
// the output head.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/model.h"

namespace squeeze::model {

// "ARCH.suffix", the metadata key of hp.arch.
std::string arch_key(const HParams& hp, const char* suffix);
// v, checked to be in 1..2^24 (FormatError naming key k otherwise).
int64_t positive(const gguf::File& f, const std::string& k, int64_t v);
// A weight matrix [n_in] -> [n_out] (ggml shape [n_in, n_out]) of a supported format.
ops::WeightView bind_matrix(const gguf::File& f, const std::string& name, int64_t n_in,
                            int64_t n_out);
// The n_expert matrices [n_in] -> [n_out] stacked in one 3-D tensor [n_in, n_out, n_expert]
// (a MoE layer's ffn_*_exps), as one view each.
std::vector<ops::WeightView> bind_expert_matrices(const gguf::File& f, const std::string& name,
                                                  int64_t n_in, int64_t n_out, int64_t n_expert);
// A 1-D F32 vector of n elements.
const float* bind_vector(const gguf::File& f, const std::string& name, int64_t n);
// The same, or null when the file has no tensor of that name.
const float* bind_optional_vector(const gguf::File& f, const std::string& name, int64_t n);
// Layer il's optional q/k/v biases (blk.IL.attn_q.bias, ...), into L.bq, bk, bv.
void bind_qkv_biases(const gguf::File& f, const HParams& hp, int64_t il, LayerWeights& L);

// The llama-style keys: block_count, context_length, embedding_length, feed_forward_length,
// attention.head_count(_kv), attention.key_length, rope.dimension_count, rope.freq_base,
// attention.layer_norm_rms_epsilon. Throws FormatError naming a missing or bad key.
void read_transformer_hparams(const gguf::File& f, HParams& hp);
// token_embd (sets n_vocab), output_norm and output (tied to token_embd when absent); sizes
// m.layers to hp.n_layer after checking the file has tensors enough for them.
void bind_embedding_and_head(const gguf::File& f, HParams& hp, Model& m);
// "blk.IL."
std::string layer_prefix(int64_t il);

// The seven matrices of a llama-style layer (q, k, v, o; gate, up, down), in the order the
// forward pass reads them, with the intermediate each multiplies.
extern const LayerMatrix kStandardLayerMatrices[7];
// Binds layer il's matrices of the manifest into L, shapes checked.
void bind_layer_matrices(const gguf::File& f, const HParams& hp, std::span<const LayerMatrix> manifest,
                         int64_t il, LayerWeights& L);

}  // namespace squeeze::model
