#include "model/llama.h"

#include <string>

#include "model/blocks.h"
#include "model/loader.h"
#include "model/names.h"

namespace squeeze::model {

namespace {


void load(const gguf::File& f, HParams& hp, Model& m) {
  read_transformer_hparams(f, hp);
  hp.rope_layout = ops::RopeLayout::Norm;
  bind_embedding_and_head(f, hp, m);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = layer_prefix(il);
    LayerWeights& L = m.layers[il];
    L.attn_norm = bind_vector(f, p + "attn_norm.weight", hp.n_embd);
    L.ffn_norm = bind_vector(f, p + "ffn_norm.weight", hp.n_embd);
    bind_layer_matrices(f, hp, kStandardLayerMatrices, il, L);
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

const Arch kLlamaArch{"llama", load, kStandardLayerMatrices, llama_layer};

}  // namespace squeeze::model
