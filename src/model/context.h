// Per-sequence state: the KV cache, the position, and scratch buffers sized once up front.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/act_sparsity.h"
#include "model/batch.h"
#include "model/model.h"
#include "ops/attention.h"
#include "ops/matmul.h"

namespace squeeze::model {

// Called with every named intermediate when set (for debugging and reference diffs):
// name (model/names.h), layer (-1 outside layers), [n_tokens, width] floats.
using TensorCallback =
    std::function<void(std::string_view name, int layer, const float* data, int64_t n_tokens,
                       int64_t width)>;

// A KV cache of n_ctx cells for the model's layers and kv heads.
kv::KvCache make_kv_cache(const HParams& hp, int64_t n_ctx);

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
  // The rotary angles of the chunk's positions (ops::Rope::angles, n_rot floats each): computed
  // by the first layer of a chunk, reused by the others.
  std::vector<float> rope_cs;
  std::vector<int32_t> rope_pos;  // the positions rope_cs holds the angles of
  // A sequence's query rows and attention output gathered from an interleaved batch.
  std::vector<float> q_seq, attn_seq;
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
};

class Context {
 public:
  // n_ctx: KV cache capacity in tokens per sequence (throws UsageError above the model's trained
  // length); n_batch: tokens per forward chunk; n_seq: sequences (decode_batch), 0..n_seq-1.
  Context(const Model& model, int64_t n_ctx, ThreadPool& pool, int64_t n_batch = 256,
          int64_t n_seq = 1);

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
  // Throws UsageError for a bad batch, Error for an overflow (nothing decoded then).
  std::span<const float> decode_batch(const Batch& batch);

  // decode / decode_from / reset / truncate act on sequence 0.
  int64_t n_past(int64_t seq = 0) const { return n_past_[static_cast<size_t>(seq)]; }
  int64_t n_ctx() const { return kv_.n_ctx(); }
  int64_t n_seq() const { return kv_.n_seq(); }
  // Forgets the sequence (keeps the buffers).
  void reset(int64_t seq = 0) { truncate(0, seq); }
  // Drops positions >= n (e.g. to reuse a shared prompt prefix).
  void truncate(int64_t n, int64_t seq = 0);

  void set_callback(TensorCallback cb) { callback_ = std::move(cb); }
  // Zeroes small activations by the policy's thresholds from now on (null: dense again). The
  // policy must outlive the context's use of it.
  void set_act_sparsity(const ActSparsity* policy) { s_.sparsity = policy; }
  const SparsityCounters& sparsity_counters() const { return s_.counters; }
  void reset_sparsity_counters() { s_.counters.reset(); }
  const Model& model() const { return model_; }
  size_t kv_bytes() const { return kv_.bytes(); }

 private:

  const Model& model_;
  ThreadPool& pool_;
  kv::KvCache kv_;
  ForwardScratch s_;
  std::vector<float> logits_;  // [rows with logits, n_vocab] grown on demand
  std::vector<int64_t> n_past_;  // per sequence
  TensorCallback callback_;
};

}  // namespace squeeze::model
