#include "model/gemma3.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "model/blocks.h"
#include "model/loader.h"
#include "model/names.h"

namespace squeeze::model {

namespace {


// Which layers are local: ATTN.sliding_window_pattern as an array of booleans, or as a period
// n (every n-th layer global, the others local; 6 when absent), as llama.cpp reads it.
void read_swa_pattern(const gguf::File& f, HParams& hp) {
  const std::string k = arch_key(hp, "attention.sliding_window_pattern");
  hp.swa_layer.assign(static_cast<size_t>(hp.n_layer), 0);
  if (const gguf::Value* v = f.find(k); v != nullptr && v->type == gguf::ValueType::Array) {
    std::vector<int64_t> flags;
    if (v->array_type == gguf::ValueType::Bool) {
      flags.assign(v->array_data, v->array_data + v->array_len);
    } else {
      flags = f.get_int_array(k);
    }
    if (flags.size() != static_cast<size_t>(hp.n_layer)) {
      throw FormatError(f.path() + ": metadata '" + k + "' has " + std::to_string(flags.size()) +
                        " entries for " + std::to_string(hp.n_layer) + " layers");
    }
    for (size_t il = 0; il < flags.size(); ++il) hp.swa_layer[il] = flags[il] != 0;
    return;
  }
  const int64_t period = f.get_int(k).value_or(6);
  if (period < 0 || period > hp.n_layer + 1) {
    throw FormatError(f.path() + ": metadata '" + k + "' has invalid value " + std::to_string(period));
  }
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    hp.swa_layer[il] = period == 0 || il % period < period - 1;
  }
}

void load(const gguf::File& f, HParams& hp, Model& m) {
  read_transformer_hparams(f, hp);
  hp.rope_layout = ops::RopeLayout::Neox;
  hp.ffn_act = HParams::FfnAct::GeluTanh;
  hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
  // Gemma's query scale (gemma_pytorch's config): 1/sqrt(head_dim), except the 27B's
  // 1/sqrt(n_embd / n_head).
  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_layer == 62 ? hp.n_embd / hp.n_head
                                                                         : hp.head_dim));
  hp.scale_q_first = true;
  if (const auto w = f.get_int(arch_key(hp, "attention.sliding_window")); w && *w > 0) {
    hp.n_swa = positive(f, arch_key(hp, "attention.sliding_window"), *w);
    read_swa_pattern(f, hp);
    hp.rope_freq_base_swa = static_cast<float>(
        f.get_float(arch_key(hp, "rope.freq_base_swa")).value_or(10000.0));
  }
  if (f.get_float(arch_key(hp, "final_logit_softcapping")).value_or(0.0) != 0.0) {
    throw FormatError(f.path() + ": final_logit_softcapping is set, which squeeze does not "
                      "support for gemma3");
  }
  bind_embedding_and_head(f, hp, m);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = layer_prefix(il);
    LayerWeights& L = m.layers[il];
    L.attn_norm = bind_vector(f, p + "attn_norm.weight", hp.n_embd);
    L.attn_q_norm = bind_vector(f, p + "attn_q_norm.weight", hp.head_dim);
    L.attn_k_norm = bind_vector(f, p + "attn_k_norm.weight", hp.head_dim);
    L.attn_post_norm = bind_vector(f, p + "post_attention_norm.weight", hp.n_embd);
    L.ffn_norm = bind_vector(f, p + "ffn_norm.weight", hp.n_embd);
    L.ffn_post_norm = bind_vector(f, p + "post_ffw_norm.weight", hp.n_embd);
    bind_layer_matrices(f, hp, kStandardLayerMatrices, il, L);
  }
}

// x += post_norm(attention(norm(x))); x += post_norm(GeGLU MLP(norm(x))); the queries and keys
// RMS-normed per head before RoPE.
void gemma3_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                  ThreadPool& pool, const ChunkLayout& b, const TensorCallback* callback) {
  const LayerPass p(m, il, b.n, s, pool, callback);
  const LayerBlocks& blocks = layer_blocks(s.sparsity);
  const int64_t n_embd = p.hp.n_embd;
  float* x = s.x.data();

  rms_norm_rows(p, x, p.L.attn_norm, s.xn.data());
  p.emit(names::kAttnNorm, s.xn.data(), n_embd);
  blocks.qkv(p);
  rms_norm_heads(p, s.q.data(), p.hp.n_head, p.L.attn_q_norm);
  rms_norm_heads(p, s.k.data(), p.hp.n_head_kv, p.L.attn_k_norm);
  rope_qk(p, b);
  attend(p, kv, b);
  blocks.attn_output(p);
  rms_norm_rows(p, s.proj.data(), p.L.attn_post_norm, s.proj.data());
  p.emit(names::kAttnOut, s.proj.data(), n_embd);
  add_rows(p, x, s.proj.data());
  p.emit(names::kFfnInp, x, n_embd);

  rms_norm_rows(p, x, p.L.ffn_norm, s.xn.data());
  p.emit(names::kFfnNorm, s.xn.data(), n_embd);
  blocks.mlp(p);
  rms_norm_rows(p, s.proj.data(), p.L.ffn_post_norm, s.proj.data());
  p.emit(names::kFfnOut, s.proj.data(), n_embd);
  add_rows(p, x, s.proj.data());
  p.emit(names::kLOut, x, n_embd);
}

}  // namespace

const Arch kGemma3Arch{"gemma3", load, kStandardLayerMatrices, gemma3_layer};

}  // namespace squeeze::model
