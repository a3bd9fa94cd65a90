#include "model/llama.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "model/blocks.h"
#include "model/names.h"

namespace squeeze::model {

namespace {

std::string key(const HParams& hp, const char* suffix) { return hp.arch + "." + suffix; }

// Binds a weight matrix [n_in] -> [n_out] (ggml shape [n_in, n_out]) and checks it.
ops::WeightView bind_matrix(const gguf::File& f, const std::string& name, int64_t n_in,
                            int64_t n_out) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) throw FormatError(f.path() + ": missing tensor '" + name + "'");
  if (t->shape.size() != 2 || t->shape[0] != n_in || t->shape[1] != n_out) {
    throw FormatError(f.path() + ": tensor '" + name + "' has shape [" +
                      std::to_string(t->shape[0]) +
                      (t->shape.size() > 1 ? ", " + std::to_string(t->shape[1]) : "") +
                      "], expected [" + std::to_string(n_in) + ", " + std::to_string(n_out) + "]");
  }
  const auto& info = formats::format_info(t->type);
  if (!info.supported) {
    throw FormatError(f.path() + ": tensor '" + name + "' has type " + std::string(info.name) +
                      ", which squeeze cannot compute with yet");
  }
  ops::WeightView w;
  w.type = t->type;
  w.n_cols = n_in;
  w.n_rows = n_out;
  w.row_bytes = formats::row_bytes(t->type, n_in);
  w.data = static_cast<const uint8_t*>(t->data);
  return w;
}

// Binds a 1-D F32 vector of n elements.
const float* bind_vector(const gguf::File& f, const std::string& name, int64_t n) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) throw FormatError(f.path() + ": missing tensor '" + name + "'");
  if (t->shape.size() != 1 || t->shape[0] != n || t->type != formats::DType::F32) {
    throw FormatError(f.path() + ": tensor '" + name + "' must be f32 of shape [" +
                      std::to_string(n) + "]");
  }
  return static_cast<const float*>(t->data);
}

int64_t positive(const gguf::File& f, const std::string& k, int64_t v) {
  if (v <= 0 || v > (int64_t{1} << 24)) {
    throw FormatError(f.path() + ": metadata '" + k + "' has invalid value " + std::to_string(v));
  }
  return v;
}

// The matrices of a layer, in the order the forward pass reads them.
constexpr LayerMatrix kLayerMatrices[] = {
    {"attn_q.weight", &LayerWeights::wq, Width::Embd, Width::Q, names::kAttnNorm},
    {"attn_k.weight", &LayerWeights::wk, Width::Embd, Width::Kv, names::kAttnNorm},
    {"attn_v.weight", &LayerWeights::wv, Width::Embd, Width::Kv, names::kAttnNorm},
    {"attn_output.weight", &LayerWeights::wo, Width::Q, Width::Embd, names::kKqvOut},
    {"ffn_gate.weight", &LayerWeights::ffn_gate, Width::Embd, Width::Ff, names::kFfnNorm},
    {"ffn_up.weight", &LayerWeights::ffn_up, Width::Embd, Width::Ff, names::kFfnNorm},
    {"ffn_down.weight", &LayerWeights::ffn_down, Width::Ff, Width::Embd, names::kFfnAct},
};

void load(const gguf::File& f, HParams& hp, Model& m) {
  auto req = [&](const char* s) { return positive(f, key(hp, s), f.require_int(key(hp, s))); };
  hp.n_layer = req("block_count");
  hp.n_ctx_train = req("context_length");
  hp.n_embd = req("embedding_length");
  hp.n_ff = req("feed_forward_length");
  hp.n_head = req("attention.head_count");
  hp.n_head_kv = f.get_int(key(hp, "attention.head_count_kv")).value_or(hp.n_head);
  positive(f, key(hp, "attention.head_count_kv"), hp.n_head_kv);
  if (hp.n_head % hp.n_head_kv != 0) {
    throw FormatError(f.path() + ": head_count " + std::to_string(hp.n_head) +
                      " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
  }
  hp.head_dim = f.get_int(key(hp, "attention.key_length")).value_or(hp.n_embd / hp.n_head);
  positive(f, key(hp, "attention.key_length"), hp.head_dim);
  hp.n_rot = f.get_int(key(hp, "rope.dimension_count")).value_or(hp.head_dim);
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
    throw FormatError(f.path() + ": invalid rope.dimension_count " + std::to_string(hp.n_rot));
  }
  hp.rope_freq_base = static_cast<float>(f.get_float(key(hp, "rope.freq_base")).value_or(10000.0));
  hp.rms_eps = static_cast<float>(f.require_float(key(hp, "attention.layer_norm_rms_epsilon")));
  hp.rope_layout = ops::RopeLayout::Norm;

  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (embd == nullptr) throw FormatError(f.path() + ": missing tensor 'token_embd.weight'");
  if (embd->shape.size() != 2) throw FormatError(f.path() + ": token_embd.weight must be 2-D");
  hp.n_vocab = embd->shape[1];
  m.token_embd = bind_matrix(f, "token_embd.weight", hp.n_embd, hp.n_vocab);
  m.output_norm = bind_vector(f, "output_norm.weight", hp.n_embd);
  if (f.find_tensor("output.weight") != nullptr) {
    m.output = bind_matrix(f, "output.weight", hp.n_embd, hp.n_vocab);
  } else {
    m.output = m.token_embd;
    m.tied_output = true;
  }

  // Every layer has tensors of its own, so a block count beyond the tensor count is corrupt
  // (and must not size the layer table: up to 2^24 layers would be gigabytes).
  if (static_cast<uint64_t>(hp.n_layer) > f.tensors().size()) {
    throw FormatError(f.path() + ": block_count " + std::to_string(hp.n_layer) +
                      " is more than the file's " + std::to_string(f.tensors().size()) +
                      " tensors can hold");
  }
  m.layers.resize(hp.n_layer);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& L = m.layers[il];
    L.attn_norm = bind_vector(f, p + "attn_norm.weight", hp.n_embd);
    L.ffn_norm = bind_vector(f, p + "ffn_norm.weight", hp.n_embd);
    for (const LayerMatrix& lm : kLayerMatrices) {
      L.*lm.view =
          bind_matrix(f, p + std::string(lm.suffix), width(hp, lm.n_in), width(hp, lm.n_out));
    }
  }
}

// One pre-norm block: x += attention(norm(x)); x += SwiGLU MLP(norm(x)). Every intermediate
// has a name (passed to the callback).
void llama_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                 ThreadPool& pool, const ChunkLayout& b, const TensorCallback* callback) {
  const LayerPass p(m, il, b.n, s, pool, callback);
  const LayerBlocks& blocks = layer_blocks(s.sparsity);
  const int64_t n_embd = p.hp.n_embd;
  float* x = s.x.data();

  rms_norm_rows(p, x, p.L.attn_norm, s.xn.data());
  p.emit(names::kAttnNorm, s.xn.data(), n_embd);
  blocks.qkv(p);
  rope_qk(p, b);
  attend(p, kv, b);
  blocks.attn_output(p);
  p.emit(names::kAttnOut, s.proj.data(), n_embd);
  add_rows(p, x, s.proj.data());
  p.emit(names::kFfnInp, x, n_embd);

  rms_norm_rows(p, x, p.L.ffn_norm, s.xn.data());
  p.emit(names::kFfnNorm, s.xn.data(), n_embd);
  blocks.mlp(p);
  p.emit(names::kFfnOut, s.proj.data(), n_embd);
  add_rows(p, x, s.proj.data());
  p.emit(names::kLOut, x, n_embd);
}

}  // namespace

const Arch kLlamaArch{"llama", load, kLayerMatrices, llama_layer};

}  // namespace squeeze::model
