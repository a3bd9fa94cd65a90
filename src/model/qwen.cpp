#include "model/qwen.h"

#include "core/error.h"
#include "model/llama.h"
#include "model/loader.h"

namespace squeeze::model {

namespace {

// A qwen3moe layer's dense matrices: the attention's four of the llama layer's seven.
constexpr std::span<const LayerMatrix> kAttentionLayerMatrices(kStandardLayerMatrices, 4);

void load_qwen2(const gguf::File& f, HParams& hp, Model& m) {
  load_llama_family(f, hp, m, ops::RopeLayout::Neox, false);
}

void load_qwen3(const gguf::File& f, HParams& hp, Model& m) {
  load_llama_family(f, hp, m, ops::RopeLayout::Neox, true);
}

// qwen3's attention; in place of the MLP a router (ffn_gate_inp) over expert_count SwiGLU
// experts of expert_feed_forward_length, expert_used_count of them per token.
void load_qwen3moe(const gguf::File& f, HParams& hp, Model& m) {
  read_transformer_hparams(f, hp);
  hp.rope_layout = ops::RopeLayout::Neox;
  auto key = [&](const char* s) { return arch_key(hp, s); };
  hp.n_expert = positive(f, key("expert_count"), f.require_int(key("expert_count")));
  hp.n_expert_used = positive(f, key("expert_used_count"), f.require_int(key("expert_used_count")));
  if (hp.n_expert_used > hp.n_expert) {
    throw FormatError(f.path() + ": metadata '" + key("expert_used_count") + "' (" +
                      std::to_string(hp.n_expert_used) + ") exceeds expert_count (" +
                      std::to_string(hp.n_expert) + ")");
  }
  // llama.cpp's default when the key is missing: the dense width shared by the used experts.
  hp.n_ff = positive(f, key("expert_feed_forward_length"),
                     f.get_int(key("expert_feed_forward_length")).value_or(hp.n_ff / hp.n_expert_used));
  bind_embedding_and_head(f, hp, m);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = layer_prefix(il);
    LayerWeights& L = m.layers[il];
    L.attn_norm = bind_vector(f, p + "attn_norm.weight", hp.n_embd);
    L.ffn_norm = bind_vector(f, p + "ffn_norm.weight", hp.n_embd);
    bind_layer_matrices(f, hp, kAttentionLayerMatrices, il, L);
    L.attn_q_norm = bind_vector(f, p + "attn_q_norm.weight", hp.head_dim);
    L.attn_k_norm = bind_vector(f, p + "attn_k_norm.weight", hp.head_dim);
    L.ffn_gate_inp = bind_matrix(f, p + "ffn_gate_inp.weight", hp.n_embd, hp.n_expert);
    const auto gate = bind_expert_matrices(f, p + "ffn_gate_exps.weight", hp.n_embd, hp.n_ff, hp.n_expert);
    const auto up = bind_expert_matrices(f, p + "ffn_up_exps.weight", hp.n_embd, hp.n_ff, hp.n_expert);
    const auto down = bind_expert_matrices(f, p + "ffn_down_exps.weight", hp.n_ff, hp.n_embd, hp.n_expert);
    L.experts.resize(static_cast<size_t>(hp.n_expert));
    for (int64_t e = 0; e < hp.n_expert; ++e) L.experts[e] = {gate[e], up[e], down[e]};
  }
}

}  // namespace

const Arch kQwen2Arch{"qwen2", load_qwen2, kStandardLayerMatrices, llama_family_layer};
const Arch kQwen3Arch{"qwen3", load_qwen3, kStandardLayerMatrices, llama_family_layer};
const Arch kQwen3MoeArch{"qwen3moe", load_qwen3moe, kAttentionLayerMatrices, llama_family_layer};

}  // namespace squeeze::model
