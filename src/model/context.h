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
#include "model/model.h"
#include "ops/attention.h"
#include "ops/matmul.h"

namespace squeeze::model {

// Called with every named intermediate when set (for debugging and reference diffs):
// name ("attn_norm", "q", "ffn_out", ...), layer (-1 outside layers), [n_tokens, width] floats.
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
  // The rotary angles of positions [rope_pos0, rope_pos0 + rope_n) (ops::Rope::angles, n_rot
  // floats each): computed by the first layer of a chunk, reused by the others.
  std::vector<float> rope_cs;
  int64_t rope_pos0 = -1, rope_n = 0;
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
  // n_ctx: KV cache capacity in tokens (throws UsageError above the model's trained length);
  // n_batch: tokens per forward chunk during prefill.
  Context(const Model& model, int64_t n_ctx, ThreadPool& pool, int64_t n_batch = 256);

  // Runs `tokens` at positions n_past().. and appends them to the KV cache. Returns the logits
  // of the last token ([n_vocab]), or of every token ([n_tokens, n_vocab]) with all_logits.
  // Throws Error when the tokens would overflow the context.
  std::span<const float> decode(std::span<const int32_t> tokens, bool all_logits = false);
  // Like decode, but returns the logits of tokens[first..] only ([n_tokens - first, n_vocab]):
  // the output head runs on just those rows (as llama.cpp's batch logits flags do). With
  // first == n_tokens no logits are computed and the span is empty.
  std::span<const float> decode_from(std::span<const int32_t> tokens, int64_t first);

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return kv_.n_cells(); }
  // Forgets the sequence (keeps the buffers).
  void reset() { n_past_ = 0; }
  // Drops positions >= n (e.g. to reuse a shared prompt prefix).
  void truncate(int64_t n);

  void set_callback(TensorCallback cb) { callback_ = std::move(cb); }
  // Zeroes small activations by the policy's thresholds from now on (null: dense again). The
  // policy must outlive the context's use of it.
  void set_act_sparsity(const ActSparsity* policy) { s_.sparsity = policy; }
  const SparsityCounters& sparsity_counters() const { return s_.counters; }
  void reset_sparsity_counters() { s_.counters.reset(); }
  const Model& model() const { return model_; }
  size_t kv_bytes() const { return kv_.bytes(); }

 private:
  void forward_chunk(std::span<const int32_t> tokens, float* logits, bool all_logits);

  const Model& model_;
  ThreadPool& pool_;
  kv::KvCache kv_;
  ForwardScratch s_;
  std::vector<float> logits_;  // [n_batch or 1, n_vocab] grown on demand
  int64_t n_past_ = 0;
  TensorCallback callback_;
};

}  // namespace squeeze::model
