// The forward pass, whatever the architecture: the embedding, the model's layers through its
// architecture's table entry (model/arch.h), the output head; and the scratch it runs in.
// Context (context.h) drives it for decoding; calibration runs its layers one at a time.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/act_sparsity.h"
#include "model/batch.h"
#include "model/model.h"
#include "ops/attention.h"
#include "ops/attention_probs.h"
#include "ops/head_scores.h"
#include "ops/matmul.h"

namespace squeeze::model {

// Called with every named intermediate when set (for debugging and reference diffs):
// name (model/names.h), layer (-1 outside layers), [n_tokens, width] floats.
using TensorCallback =
    std::function<void(std::string_view name, int layer, const float* data, int64_t n_tokens,
                       int64_t width)>;

// A KV cache of n_tokens cells for the model's layers and kv heads, for n_seq sequences.
kv::KvCache make_kv_cache(const HParams& hp, int64_t n_tokens, int64_t n_seq = 1,
                          const kv::KvOptions& options = {});
// Each layer's rotary embedding of keys (its base: local or global; Llama 3.1+'s rope_freqs),
// for a cache that quantizes keys before RoPE (kv::KvCache::set_key_rope).
std::vector<ops::Rope> key_ropes(const Model& m);

// Dynamic head pruning in prefill (docs/POP.md): per chunk of `chunk` prompt positions
// (aligned to multiples of it, and cut where a forward chunk ends) and per layer, the round(keep * n_head) query heads (at least one) that score highest
// (ops/head_scores.h) on `probes` probe queries spread over the chunk run; the others add
// nothing to that chunk's attention output. Their K and V are written all the same.
struct HeadPruning {
  double keep = 1.0;
  int64_t chunk = 256;
  ops::HeadScore score = ops::HeadScore::VNorm;
  int64_t probes = 8;
  // Keep whole KV groups (a KV head with its query heads): the round(keep * n_head_kv) groups
  // of highest summed score (at least one). The attention kernel reads K and V per group, so
  // only a dropped group saves their reads.
  bool whole_groups = false;
  // A stored ranking ([n_layer * n_head] scores, sparsity::HeadRanking) used in place of the
  // per-chunk scores: every chunk of a layer keeps the same heads. Empty: score per chunk.
  std::vector<float> fixed = {};
};

// Scratch for one forward chunk of up to n_batch tokens.
struct ForwardScratch {
  ForwardScratch(const HParams& hp, int64_t n_batch);
  int64_t n_batch;
  std::vector<float> x;        // [n_batch, n_embd] residual stream
  std::vector<float> xn;       // [n_batch, n_embd] normalised input of a block
  std::vector<float> q;        // [n_batch, n_head * head_dim]
  std::vector<float> k;        // [n_batch, n_head_kv * head_dim]
  std::vector<float> v;        // [n_batch, n_head_kv * head_dim]
  std::vector<float> attn;     // [n_batch, n_head * head_dim]
  std::vector<float> gate;     // [n_batch, n_ff]
  std::vector<float> up;       // [n_batch, n_ff]
  std::vector<float> proj;     // [n_batch, n_embd] output of wo / ffn_down
  ops::MatmulScratch mm;
  ops::AttentionScratch att;
  // The rotary angles of the chunk's positions (ops::Rope::angles, n_rot floats each) for each
  // rope base the layers use (local and global layers may differ): computed by the first layer
  // of a chunk with that base, reused by the others.
  struct RopeAngles {
    float base = 0;
    std::vector<int32_t> pos;  // the positions cs holds the angles of
    std::vector<float> cs;
  };
  std::array<RopeAngles, 2> rope;
  // A sequence's query rows and attention output gathered from an interleaved batch.
  std::vector<float> q_seq, attn_seq;
  std::vector<ops::DecodeQuery> decode_queries;  // the chunk's one-token runs (attend)
  std::vector<kv::KvRows> kv_rows;  // per run of a chunk, a quantized cache's rows (attend)
  std::vector<float> kv_attention;  // kv::attention_decode's scratch
  // Attention probabilities an eviction policy collects (kv/evict.h): per run of the chunk, in
  // layout order, where they go (acc for layer 0; layer il's at acc + il * n_head_kv * stride).
  // Empty: none collected.
  std::vector<ops::ProbSums> attn_probs;
  std::vector<float> probs_scratch;
  // Activation sparsity: the policy (null: dense), indices of the kept activations of one
  // token, kernel scratch, and counters of what was kept.
  const ActSparsity* sparsity = nullptr;
  std::vector<int32_t> idx;
  std::vector<float> fused;  // the output of a stacked product (SparseLayer::qkv, gate_up)
  ops::SparseScratch sparse;
  // The MLP of one sparse token run by threads that own ranges of neurons (llama.cpp): per
  // range its kept neurons, prepared input, partial output and kernel scratch.
  std::vector<int32_t> ffn_idx;
  std::vector<ops::SparseInput> ffn_in;
  std::vector<float> ffn_acc;
  SparsityCounters counters;
  // Head pruning for the pass (null: every head), with its scores, mask and probes.
  const HeadPruning* heads = nullptr;
  std::vector<float> head_score, probe_q;
  std::vector<uint8_t> head_keep;
  std::vector<int64_t> probe_pos;
  std::vector<ops::HeadSegment> head_segments;
  ops::HeadScoreScratch head_scratch;
  // A MoE layer's routing (moe_mlp): router probabilities [n, n_expert], chosen experts and
  // their weights [n, n_expert_used], the rows routed to one expert (token * n_expert_used +
  // slot), their gathered inputs and outputs, and each slot's weighted output.
  struct Moe {
    std::vector<float> probs;
    std::vector<int32_t> chosen, order, rows;
    std::vector<float> weights, x, y, slots;
  } moe;
};

struct ForwardArgs {
  std::span<const int32_t> tokens;  // one chunk, at most scratch.n_batch
  const ChunkLayout* layout = nullptr;  // the tokens' positions and sequences
  float* logits = nullptr;          // [logit_rows.size(), n_vocab]; nullptr: no head
  std::span<const int32_t> logit_rows;  // rows of the chunk whose logits are wanted, ascending
  const TensorCallback* callback = nullptr;
  // [n_layer] or empty: layers run KV-only (write_kv_only: POP's prefill skipping) where != 0.
  std::span<const uint8_t> skip_layers;
  const HeadPruning* heads = nullptr;  // prompt chunks' head pruning (null: none)
};

// The forward pass of one chunk: embeds the tokens, runs every layer (writing their K and V
// into kv; a skipped layer only those) and, for the rows asked for, the output head.
void forward(const Model& m, kv::KvCache& kv, ForwardScratch& s, ThreadPool& pool,
             const ForwardArgs& args);

// The pieces of forward, for callers that run the layers one at a time (calibration):
// x[t * n_embd ..] = the embedding row of tokens[t].
void embed(const Model& m, std::span<const int32_t> tokens, float* x);
// Layer `il` of the model's architecture on the residual stream s.x ([b.n, n_embd], updated in
// place) for the tokens of layout b, writing their K and V into kv's layer il.
void forward_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                   ThreadPool& pool, const ChunkLayout& b, const TensorCallback* callback);
// The same for n tokens of sequence 0 at positions pos0.. (kv's sequence 0 is given cells for
// them when it has none: calibration runs every layer over the same positions, none committed).
void forward_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                   ThreadPool& pool, int64_t n, int64_t pos0, const TensorCallback* callback);

}  // namespace squeeze::model
