// The state of decoding: the KV cache of every sequence, and scratch buffers sized once up
// front.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kv/evict.h"
#include "kv/kv_cache.h"
#include "model/act_sparsity.h"
#include "model/batch.h"
#include "model/forward.h"
#include "model/model.h"

namespace squeeze::model {

class Context {
 public:
  // n_ctx: the most tokens a sequence holds (throws UsageError above the model's trained
  // length); n_batch: tokens per forward chunk; n_seq: sequences (decode_batch), 0..n_seq-1;
  // kv_tokens: the KV cache's capacity in tokens, shared by the sequences (0: room for n_ctx
  // tokens in each); kv_options: the cache's storage (kv/kv_quant.h).
  Context(const Model& model, int64_t n_ctx, ThreadPool& pool, int64_t n_batch = 256,
          int64_t n_seq = 1, int64_t kv_tokens = 0, const kv::KvOptions& kv_options = {});

  // Runs `tokens` at positions n_past().. and appends them to the KV cache. Returns the logits
  // of the last token ([n_vocab]), or of every token ([n_tokens, n_vocab]) with all_logits.
  // Throws Error when the tokens would overflow the context.
  std::span<const float> decode(std::span<const int32_t> tokens, bool all_logits = false);
  // Like decode, but returns the logits of tokens[first..] only ([n_tokens - first, n_vocab]):
  // the output head runs on just those rows (as llama.cpp's batch logits flags do). With
  // first == n_tokens no logits are computed and the span is empty.
  std::span<const float> decode_from(std::span<const int32_t> tokens, int64_t first);
  // Runs a batch of tokens of any of the sequences (model/batch.h): each sequence's tokens must
  // continue it (positions n_past(seq), n_past(seq) + 1, ... in batch order). Returns the logits
  // of the tokens whose logits are wanted, in batch order ([count, n_vocab]). A sequence's
  // logits equal those of the same tokens decoded alone, bit for bit for the integer formats.
  // Throws UsageError for a bad batch, Error for a sequence past n_ctx or a KV cache without
  // the blocks the batch needs (nothing decoded then: kv().blocks_needed tells beforehand).
  std::span<const float> decode_batch(const Batch& batch);

  // decode / decode_from / reset / truncate act on sequence 0.
  // The position the sequence's next token takes (the tokens it has seen, evicted ones too).
  int64_t n_past(int64_t seq = 0) const { return kv_.seq_pos(seq); }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_seq() const { return kv_.n_seq(); }
  // Forgets the sequence (its blocks go back to the cache).
  void reset(int64_t seq = 0) { truncate(0, seq); }
  // Drops positions >= n (e.g. to reuse a shared prompt prefix).
  void truncate(int64_t n, int64_t seq = 0);
  // dst (reset first) continues from src's positions, sharing its KV blocks (for n > 1).
  void fork(int64_t src, int64_t dst);
  // For an empty sequence: takes the KV of the longest cached prefix of `tokens` (whole blocks,
  // at least one token left to decode). Returns the positions taken; decode the rest.
  int64_t reuse_prefix(int64_t seq, std::span<const int32_t> tokens) {
    return kv_.reuse_prefix(seq, tokens);
  }
  const kv::KvCache& kv() const { return kv_; }
  // The cache, for a scheduler that manages the sequences' blocks itself (serve/scheduler.h).
  kv::KvCache& kv_mut() { return kv_; }

  void set_callback(TensorCallback cb) { callback_ = std::move(cb); }
  // Zeroes small activations by the policy's thresholds from now on (null: dense again). The
  // policy must outlive the context's use of it.
  void set_act_sparsity(const ActSparsity* policy) { s_.sparsity = policy; }
  const ActSparsity* act_sparsity() const { return s_.sparsity; }
  const SparsityCounters& sparsity_counters() const { return s_.counters; }
  void reset_sparsity_counters() { s_.counters.reset(); }
  // Prefill-only layer skipping (POP, docs/POP.md): layers[il] != 0 marks layer il skipped
  // (one entry per layer; empty or all zero: none). From now on a sequence's tokens before its
  // first token with logits wanted in a batch (a prompt but for its last token) pass a skipped
  // layer by writing its K and V only (attention norm, K/V projections, RoPE) and leave the
  // residual stream unchanged; tokens with logits, and those after them, run every layer.
  // Throws UsageError for a wrong length.
  void set_prefill_skip(std::vector<uint8_t> layers);
  std::span<const uint8_t> prefill_skip() const { return prefill_skip_; }
  // Dynamic head pruning (forward.h's HeadPruning) for the same prompt tokens from now on;
  // nullopt: every head. Throws UsageError for keep outside (0, 1], chunk or probes < 1.
  void set_prefill_heads(std::optional<HeadPruning> h);
  const std::optional<HeadPruning>& prefill_heads() const { return heads_; }
  // Token eviction (kv/evict.h) from now on: after every forward chunk (n_batch tokens, or one
  // decode step) a sequence holding more than the budget keeps the budget's tokens the policy
  // picks. Blocks are then taken chunk by chunk, so a cache of budget + n_batch tokens per
  // sequence suffices (a batch that finds it full fails part-way, its earlier chunks kept).
  // UsageError for bad options or a quantized cache.
  void set_eviction(const kv::EvictOptions& o);
  const kv::EvictOptions& eviction() const { return evict_; }
  // Tokens evicted so far (all sequences).
  int64_t n_evicted() const { return n_evicted_; }
  // The attention statistics the policy keeps for seq (null when it keeps none).
  const kv::EvictScores* eviction_scores(int64_t seq) const {
    return evict_scores_.empty() ? nullptr : &evict_scores_.at(static_cast<size_t>(seq));
  }
  const Model& model() const { return model_; }
  size_t kv_bytes() const { return kv_.bytes(); }

 private:
  // Runs the batch's tokens idx (ascending) in chunks, pruned (the skip set) or not, appending
  // the logits of those that want them at out.
  void run_rows(const Batch& b, std::span<const int32_t> idx, bool pruned, float*& out);
  // With eviction: takes the blocks a chunk's runs need (Error when the cache is full), and
  // sets up the attention statistics its policy collects.
  void begin_evict_chunk(const ChunkLayout& layout);
  // The error of a cache without the blocks `who` needs.
  Error kv_full(const std::string& who, int64_t blocks) const;
  // With eviction: a sequence past the budget keeps the tokens its policy picks.
  void evict(int32_t seq);

  const Model& model_;
  ThreadPool& pool_;
  int64_t n_ctx_;
  kv::KvCache kv_;
  ForwardScratch s_;
  std::vector<float> logits_;  // [rows with logits, n_vocab] grown on demand
  std::vector<std::vector<int32_t>> cells_;  // per sequence, its cells for a chunk (SeqRun::cells)
  std::vector<int32_t> run_tokens_;          // a run's tokens, committed after its chunk
  TensorCallback callback_;
  std::vector<uint8_t> prefill_skip_;
  std::optional<HeadPruning> heads_;
  std::vector<int32_t> phase_rows_[2];  // a batch's pruned and full tokens (decode_batch)
  std::vector<int32_t> chunk_pos_, chunk_tokens_;  // a chunk's positions and tokens (run_rows)
  kv::EvictOptions evict_;
  std::vector<kv::EvictScores> evict_scores_;          // per sequence
  std::vector<std::vector<float>> evict_weights_;      // per run of a chunk: its queries' weights
  std::vector<float> evict_token_scores_, evict_vnorms_;
  int64_t n_evicted_ = 0;
};

}  // namespace squeeze::model
