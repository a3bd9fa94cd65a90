#include "model/loader.h"

#include "core/error.h"
#include "formats/sparse.h"
#include "model/names.h"

namespace squeeze::model {

std::string arch_key(const HParams& hp, const char* suffix) { return hp.arch + "." + suffix; }

std::string layer_prefix(int64_t il) { return "blk." + std::to_string(il) + "."; }

const LayerMatrix kStandardLayerMatrices[7] = {
    {"attn_q.weight", &LayerWeights::wq, Width::Embd, Width::Q, names::kAttnNorm},
    {"attn_k.weight", &LayerWeights::wk, Width::Embd, Width::Kv, names::kAttnNorm},
    {"attn_v.weight", &LayerWeights::wv, Width::Embd, Width::Kv, names::kAttnNorm},
    {"attn_output.weight", &LayerWeights::wo, Width::Q, Width::Embd, names::kKqvOut},
    {"ffn_gate.weight", &LayerWeights::ffn_gate, Width::Embd, Width::Ff, names::kFfnNorm},
    {"ffn_up.weight", &LayerWeights::ffn_up, Width::Embd, Width::Ff, names::kFfnNorm},
    {"ffn_down.weight", &LayerWeights::ffn_down, Width::Ff, Width::Embd, names::kFfnAct},
};

namespace {

void require_computable(const gguf::File& f, const gguf::TensorInfo& t, const std::string& name) {
  const auto& info = formats::format_info(t.type);
  if (!info.supported) {
    throw FormatError(f.path() + ": tensor '" + name + "' has type " + std::string(info.name) +
                      ", which squeeze cannot compute with yet");
  }
  // The packed sparse kernels take every block's 16 codes as given: a block that keeps another
  // count is a corrupt file, not something to compute with.
  if (t.type == formats::DType::SP8_50 &&
      !formats::sp8_valid(t.data, t.n_elements / info.block_size)) {
    throw FormatError(f.path() + ": tensor '" + name + "' has an sp8_50 block that does not keep "
                      "exactly 16 weights");
  }
}

}  // namespace

void bind_layer_matrices(const gguf::File& f, const HParams& hp, std::span<const LayerMatrix> manifest,
                         int64_t il, LayerWeights& L) {
  const std::string p = layer_prefix(il);
  for (const LayerMatrix& lm : manifest) {
    L.*lm.view = bind_matrix(f, p + std::string(lm.suffix), width(hp, lm.n_in), width(hp, lm.n_out));
  }
}

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
  require_computable(f, *t, name);
  ops::WeightView w;
  w.type = t->type;
  w.n_cols = n_in;
  w.n_rows = n_out;
  w.row_bytes = formats::row_bytes(t->type, n_in);
  w.data = static_cast<const uint8_t*>(t->data);
  return w;
}

std::vector<ops::WeightView> bind_expert_matrices(const gguf::File& f, const std::string& name,
                                                  int64_t n_in, int64_t n_out, int64_t n_expert) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) throw FormatError(f.path() + ": missing tensor '" + name + "'");
  if (t->shape.size() != 3 || t->shape[0] != n_in || t->shape[1] != n_out ||
      t->shape[2] != n_expert) {
    std::string shape;
    for (const int64_t d : t->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw FormatError(f.path() + ": tensor '" + name + "' has shape [" + shape + "], expected [" +
                      std::to_string(n_in) + ", " + std::to_string(n_out) + ", " +
                      std::to_string(n_expert) + "]");
  }
  require_computable(f, *t, name);
  std::vector<ops::WeightView> views(static_cast<size_t>(n_expert));
  for (int64_t e = 0; e < n_expert; ++e) {
    ops::WeightView& w = views[e];
    w.type = t->type;
    w.n_cols = n_in;
    w.n_rows = n_out;
    w.row_bytes = formats::row_bytes(t->type, n_in);
    w.data = static_cast<const uint8_t*>(t->data) + static_cast<size_t>(e * n_out) * w.row_bytes;
  }
  return views;
}

const float* bind_vector(const gguf::File& f, const std::string& name, int64_t n) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) throw FormatError(f.path() + ": missing tensor '" + name + "'");
  if (t->shape.size() != 1 || t->shape[0] != n || t->type != formats::DType::F32) {
    throw FormatError(f.path() + ": tensor '" + name + "' must be f32 of shape [" +
                      std::to_string(n) + "]");
  }
  return static_cast<const float*>(t->data);
}

const float* bind_optional_vector(const gguf::File& f, const std::string& name, int64_t n) {
  return f.find_tensor(name) == nullptr ? nullptr : bind_vector(f, name, n);
}

void bind_qkv_biases(const gguf::File& f, const HParams& hp, int64_t il, LayerWeights& L) {
  const std::string p = layer_prefix(il);
  L.bq = bind_optional_vector(f, p + "attn_q.bias", width(hp, Width::Q));
  L.bk = bind_optional_vector(f, p + "attn_k.bias", width(hp, Width::Kv));
  L.bv = bind_optional_vector(f, p + "attn_v.bias", width(hp, Width::Kv));
}

int64_t positive(const gguf::File& f, const std::string& k, int64_t v) {
  if (v <= 0 || v > (int64_t{1} << 24)) {
    throw FormatError(f.path() + ": metadata '" + k + "' has invalid value " + std::to_string(v));
  }
  return v;
}

void read_transformer_hparams(const gguf::File& f, HParams& hp) {
  auto key = [&](const char* s) { return arch_key(hp, s); };
  auto req = [&](const char* s) { return positive(f, key(s), f.require_int(key(s))); };
  hp.n_layer = req("block_count");
  hp.n_ctx_train = req("context_length");
  hp.n_embd = req("embedding_length");
  hp.n_ff = req("feed_forward_length");
  hp.n_head = req("attention.head_count");
  hp.n_head_kv = f.get_int(key("attention.head_count_kv")).value_or(hp.n_head);
  positive(f, key("attention.head_count_kv"), hp.n_head_kv);
  if (hp.n_head % hp.n_head_kv != 0) {
    throw FormatError(f.path() + ": head_count " + std::to_string(hp.n_head) +
                      " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
  }
  hp.head_dim = f.get_int(key("attention.key_length")).value_or(hp.n_embd / hp.n_head);
  positive(f, key("attention.key_length"), hp.head_dim);
  if (const auto v = f.get_int(key("attention.value_length")); v && *v != hp.head_dim) {
    throw FormatError(f.path() + ": metadata '" + key("attention.value_length") + "' (" +
                      std::to_string(*v) + ") differs from attention.key_length (" +
                      std::to_string(hp.head_dim) + "), which squeeze does not support");
  }
  hp.n_rot = f.get_int(key("rope.dimension_count")).value_or(hp.head_dim);
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
    throw FormatError(f.path() + ": invalid rope.dimension_count " + std::to_string(hp.n_rot));
  }
  hp.rope_freq_base = static_cast<float>(f.get_float(key("rope.freq_base")).value_or(10000.0));
  hp.rms_eps = static_cast<float>(f.require_float(key("attention.layer_norm_rms_epsilon")));
}

void bind_embedding_and_head(const gguf::File& f, HParams& hp, Model& m) {
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
}

}  // namespace squeeze::model
