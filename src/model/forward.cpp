#include "model/forward.h"

#include <algorithm>
#include <string>

#include "core/error.h"

#include "model/arch.h"
#include "model/blocks.h"
#include "model/names.h"

namespace squeeze::model {

kv::KvCache make_kv_cache(const HParams& hp, int64_t n_ctx, int64_t n_seq,
                          const kv::KvOptions& options) {
  return kv::KvCache(hp.n_layer, hp.n_head_kv * hp.head_dim, n_ctx, n_seq, options);
}

std::vector<ops::Rope> key_ropes(const Model& m) {
  const HParams& hp = m.hparams();
  std::vector<ops::Rope> out;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const float base = hp.is_swa(il) ? hp.rope_freq_base_swa : hp.rope_freq_base;
    out.emplace_back(static_cast<int>(hp.n_rot), base, hp.rope_layout,
                     m.layers[static_cast<size_t>(il)].rope_freqs);
  }
  return out;
}

ForwardScratch::ForwardScratch(const HParams& hp, int64_t n_batch_)
    : n_batch(n_batch_),
      x(n_batch_ * hp.n_embd),
      xn(n_batch_ * hp.n_embd),
      q(n_batch_ * hp.n_head * hp.head_dim),
      k(n_batch_ * hp.n_head_kv * hp.head_dim),
      v(n_batch_ * hp.n_head_kv * hp.head_dim),
      attn(n_batch_ * hp.n_head * hp.head_dim),
      gate(n_batch_ * hp.n_ff),
      up(n_batch_ * hp.n_ff),
      proj(n_batch_ * hp.n_embd),
      idx(std::max({hp.n_embd, hp.n_ff, hp.n_head * hp.head_dim})) {}

void embed(const Model& m, std::span<const int32_t> tokens, float* x) {
  const int64_t n_embd = m.hparams().n_embd;
  const float scale = m.hparams().embd_scale;
  for (size_t t = 0; t < tokens.size(); ++t) {
    float* row = x + static_cast<int64_t>(t) * n_embd;
    ops::dequantize_row(m.token_embd, tokens[t], row);
    if (scale != 1.0f) {
      for (int64_t i = 0; i < n_embd; ++i) row[i] *= scale;
    }
  }
}

void forward_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                   ThreadPool& pool, const ChunkLayout& b, const TensorCallback* callback) {
  m.arch().forward_layer(m, il, kv, s, pool, b, callback);
}

void forward_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                   ThreadPool& pool, int64_t n, int64_t pos0, const TensorCallback* callback) {
  if (!kv.prepare(0, pos0 + n - kv.seq_len(0))) {
    throw Error("KV cache: no room for positions up to " + std::to_string(pos0 + n));
  }
  std::vector<int32_t> pos, cells;
  kv.cells(0, pos0 + n, cells);
  forward_layer(m, il, kv, s, pool, single_sequence(n, static_cast<int32_t>(pos0), 0, pos, cells),
                callback);
}

void forward(const Model& m, kv::KvCache& kv, ForwardScratch& s, ThreadPool& pool,
             const ForwardArgs& a) {
  const HParams& hp = m.hparams();
  const int64_t n = static_cast<int64_t>(a.tokens.size());
  float* x = s.x.data();
  embed(m, a.tokens, x);
  s.heads = a.heads;
  if (a.callback != nullptr && *a.callback) (*a.callback)(names::kInpEmbd, -1, x, n, hp.n_embd);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (!a.skip_layers.empty() && a.skip_layers[il] != 0) {
      write_kv_only(LayerPass(m, il, n, s, pool, a.callback), kv, *a.layout);
    } else {
      m.arch().forward_layer(m, il, kv, s, pool, *a.layout, a.callback);
    }
  }
  s.heads = nullptr;
  // The output head: only the rows whose logits are wanted.
  if (a.logits == nullptr || a.logit_rows.empty()) return;
  output_head(m, s, pool, x, a.logit_rows, a.logits, a.callback);
}

}  // namespace squeeze::model
