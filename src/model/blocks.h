// The blocks that architectures compose their layers of (model/arch.h): norms, the attention
// block's steps, MLP variants, the output head. The run-time techniques live here, not in the
// architecture files: layer_blocks() picks, once per layer pass, the variant of each
// projection step that the activation-sparsity policy asks for (dense, TEAL, gate cut), and an
// architecture calls whichever it was given.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/act_sparsity.h"
#include "model/batch.h"
#include "model/forward.h"
#include "model/model.h"

namespace squeeze::model {

// A token that keeps more than this fraction of a sparse input runs densely. The sparse
// products match or beat the dense ones up to full density on SmolLM2's shapes
// (docs/SPARSITY.md), but near full density the input's preparation eats the gain.
inline constexpr double kSparseMaxDensity = 0.9;

// The bytes a dense product reads of w: the whole matrix.
inline uint64_t dense_bytes(const ops::WeightView& w) {
  return static_cast<uint64_t>(w.n_rows) * w.row_bytes;
}

// One layer's pass over a chunk of n tokens: what every block works with.
struct LayerPass {
  const HParams& hp;
  const LayerWeights& L;
  int64_t il;
  int64_t n;
  ForwardScratch& s;
  ThreadPool& pool;
  const TensorCallback* callback;  // may be null or empty
  const SparseLayer* sparse;       // the policy's layer (s.sparsity's); null when dense

  LayerPass(const Model& m, int64_t il, int64_t n, ForwardScratch& s, ThreadPool& pool,
            const TensorCallback* callback);
  bool observed() const { return callback != nullptr && *callback; }
  // Passes [n, width] floats to the callback under `name` (model/names.h).
  void emit(std::string_view name, const float* data, int64_t width) const {
    if (observed()) (*callback)(name, static_cast<int>(il), data, n, width);
  }
  // Weight bytes of a product: read, and what the dense product would read.
  void count(uint64_t read, uint64_t dense) const {
    s.counters.block_bytes_read += read;
    s.counters.block_bytes_dense += dense;
  }
  // y = w x for the chunk's n rows of x, densely (counted).
  void matmul(const ops::WeightView& w, const float* x, float* y) const;
};

// The variants of a layer's projection steps.
struct LayerBlocks {
  void (*qkv)(const LayerPass& p);          // s.xn -> s.q, s.k, s.v
  void (*attn_output)(const LayerPass& p);  // s.attn -> s.proj
  void (*mlp)(const LayerPass& p);          // gated MLP: s.xn -> s.proj (emits ffn_gate, ffn_act)
};
// The variants for `policy` (null: dense).
const LayerBlocks& layer_blocks(const ActSparsity* policy);

// The routed MLP of a MoE layer (L.experts), s.xn -> s.proj, as llama.cpp's build_moe_ffn with
// softmax gating and renormalised weights (qwen3moe): per token, the router's softmax over the
// experts, the n_expert_used most probable, their probabilities divided by their sum; the sum,
// slot by slot, of each chosen expert's SwiGLU MLP times its weight. Only the chosen experts
// run: the rows routed to an expert are gathered and multiplied at once, so each chosen
// expert's weights are read once per chunk.
void moe_mlp(const LayerPass& p);

// out[t] = rms_norm(x[t]) * w for the chunk's tokens (rows of n_embd).
void rms_norm_rows(const LayerPass& p, const float* x, const float* w, float* out);
// RMS norm of each head (head_dim values) of the chunk's rows of n_heads heads, in place, with
// the head norm's weights w [head_dim] (QK-norm).
void rms_norm_heads(const LayerPass& p, float* x, int64_t n_heads, const float* w);
// x[t] += b over the chunk's rows of `width` (a projection's bias).
void add_bias_rows(const LayerPass& p, float* x, const float* b, int64_t width);
// out = act(gate) * up over n values, act the architecture's (HParams::ffn_act).
void gated_act(const HParams& hp, const float* gate, const float* up, int64_t n, float* out);
// x += y over the chunk's rows of n_embd.
void add_rows(const LayerPass& p, float* x, const float* y);
// RoPE on s.q and s.k at the layout's positions (angles cached in s for the chunk); emits q, k, v.
void rope_qk(const LayerPass& p, const ChunkLayout& b);
// A layer skipped in prefill (POP): the attention norm of s.x, the K and V projections (their
// biases, the K head norm), RoPE on K, stored into kv's layer as attend() would; s.x unchanged.
// The same steps as every architecture's attention block (norm, qkv, head norms, RoPE).
void write_kv_only(const LayerPass& p, kv::KvCache& kv, const ChunkLayout& b);
// Per sequence of the layout: its K and V into its cells of kv's layer, then attention of its
// queries over them into s.attn (interleaved sequences gathered and scattered); emits kqv_out.
void attend(const LayerPass& p, kv::KvCache& kv, const ChunkLayout& b);

// The output head on rows `rows` of x ([*, n_embd]): final norm, then logits [rows, n_vocab]
// (sparse on the head's input when the policy asks for it); emits result_norm, result_output.
void output_head(const Model& m, ForwardScratch& s, ThreadPool& pool, const float* x,
                 std::span<const int32_t> rows, float* logits, const TensorCallback* callback);

}  // namespace squeeze::model
