#include "model/llama.h"

#include <string>

#include "model/blocks.h"
#include "model/loader.h"
#include "model/names.h"

namespace squeeze::model {

void load_llama_family(const gguf::File& f, HParams& hp, Model& m, ops::RopeLayout rope,
                       bool qk_norm) {
  read_transformer_hparams(f, hp);
  hp.rope_layout = rope;
  bind_embedding_and_head(f, hp, m);
  const float* rope_freqs = bind_optional_vector(f, "rope_freqs.weight", hp.n_rot / 2);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = layer_prefix(il);
    LayerWeights& L = m.layers[il];
    L.attn_norm = bind_vector(f, p + "attn_norm.weight", hp.n_embd);
    L.ffn_norm = bind_vector(f, p + "ffn_norm.weight", hp.n_embd);
    bind_layer_matrices(f, hp, kStandardLayerMatrices, il, L);
    bind_qkv_biases(f, hp, il, L);
    L.bo = bind_optional_vector(f, p + "attn_output.bias", hp.n_embd);
    L.b_down = bind_optional_vector(f, p + "ffn_down.bias", hp.n_embd);
    L.rope_freqs = rope_freqs;
    if (qk_norm) {
      L.attn_q_norm = bind_vector(f, p + "attn_q_norm.weight", hp.head_dim);
      L.attn_k_norm = bind_vector(f, p + "attn_k_norm.weight", hp.head_dim);
    }
  }
}

namespace {

void load(const gguf::File& f, HParams& hp, Model& m) {
  load_llama_family(f, hp, m, ops::RopeLayout::Norm, false);
}

}  // namespace

// One pre-norm block: x += attention(norm(x)); x += SwiGLU MLP(norm(x)), with the q/k/v/o and
// ffn_down biases and the per-head QK-norm of the layer when it has them, and the routed MLP of its experts
// when it has them (MoE). Every intermediate has a name (passed to the callback).
void llama_family_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                        ThreadPool& pool, const ChunkLayout& b, const TensorCallback* callback) {
  const LayerPass p(m, il, b.n, s, pool, callback);
  const LayerBlocks& blocks = layer_blocks(s.sparsity);
  const int64_t n_embd = p.hp.n_embd;
  float* x = s.x.data();

  rms_norm_rows(p, x, p.L.attn_norm, s.xn.data());
  p.emit(names::kAttnNorm, s.xn.data(), n_embd);
  blocks.qkv(p);
  const HParams& hp = p.hp;
  if (p.L.bq != nullptr) add_bias_rows(p, s.q.data(), p.L.bq, width(hp, Width::Q));
  if (p.L.bk != nullptr) add_bias_rows(p, s.k.data(), p.L.bk, width(hp, Width::Kv));
  if (p.L.bv != nullptr) add_bias_rows(p, s.v.data(), p.L.bv, width(hp, Width::Kv));
  if (p.L.attn_q_norm != nullptr) rms_norm_heads(p, s.q.data(), hp.n_head, p.L.attn_q_norm);
  if (p.L.attn_k_norm != nullptr) rms_norm_heads(p, s.k.data(), hp.n_head_kv, p.L.attn_k_norm);
  rope_qk(p, b);
  attend(p, kv, b);
  blocks.attn_output(p);
  if (p.L.bo != nullptr) add_bias_rows(p, s.proj.data(), p.L.bo, n_embd);
  p.emit(names::kAttnOut, s.proj.data(), n_embd);
  add_rows(p, x, s.proj.data());
  p.emit(names::kFfnInp, x, n_embd);

  rms_norm_rows(p, x, p.L.ffn_norm, s.xn.data());
  p.emit(names::kFfnNorm, s.xn.data(), n_embd);
  if (p.L.experts.empty()) {
    blocks.mlp(p);
    if (p.L.b_down != nullptr) add_bias_rows(p, s.proj.data(), p.L.b_down, n_embd);
  } else {
    moe_mlp(p);
  }
  p.emit(names::kFfnOut, s.proj.data(), n_embd);
  add_rows(p, x, s.proj.data());
  p.emit(names::kLOut, x, n_embd);
}

const Arch kLlamaArch{"llama", load, kStandardLayerMatrices, llama_family_layer};

}  // namespace squeeze::model
