// KV-cache token eviction: a sequence keeps at most a budget of tokens, and which ones a policy
// decides. StreamingLLM keeps the first tokens (attention sinks) and a window of the newest;
// H2O the newest plus the "heavy hitters" that gathered the most attention; A2SF the same with
// the attention decayed by age; VATP weighs the accumulated attention by the value's L1 norm;
// SnapKV scores the cache once per prompt chunk by the attention of its last `window` queries,
// max-pooled over neighbouring positions; Keyformer accumulates a Gumbel-softmax of the scores
// (noise added to the logits, a temperature tau) instead of the probabilities.
//
// Every policy keeps one set of tokens for all layers and heads (a cell of the paged cache holds
// every layer's row; H2O and SnapKV choose per head, VATP per layer: our scores sum theirs).
// Kept tokens keep the positions RoPE rotated them by when they were written (new tokens take
// the next position of the whole sequence), so no key is rotated again and no position passes
// the model's trained length: StreamingLLM re-rotates by cache position instead, to decode past
// it, which a context bounded by the trained length never needs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace squeeze::kv {

enum class EvictPolicy { None, Streaming, H2O, SnapKV, VATP, A2SF, Keyformer };

struct EvictOptions {
  EvictPolicy policy = EvictPolicy::None;
  int64_t budget = 0;   // tokens a sequence keeps after an eviction
  int64_t sinks = -1;   // first tokens always kept; -1: the policy's (streaming 4, else 0)
  int64_t recent = -1;  // newest tokens always kept; -1: the policy's (streaming: the rest of
                        // the budget; snapkv: its window; the others half of it)
  int64_t window = 32;  // SnapKV: the queries that observe (the last of a prompt chunk)
  int64_t pool = 7;     // SnapKV: the max-pooling kernel over positions (odd; 1: none)
  double alpha = 0.9;   // A2SF: the decay of accumulated attention per query
  double tau = 1.0;     // Keyformer: the temperature of its Gumbel softmax at position 0
  double tau_end = 0;   // Keyformer: the temperature at position n_ctx, reached linearly (the
                        // paper anneals from 1 to 2 over a generation); 0: tau throughout
  bool on() const { return policy != EvictPolicy::None; }
};

// "none", "streaming", "h2o", "snapkv", "vatp", "a2sf", "keyformer" and back; UsageError for another name.
EvictPolicy parse_evict_policy(std::string_view name);
std::string evict_policy_name(EvictPolicy p);
// The options with the policy's defaults filled in (sinks, recent).
EvictOptions resolved(const EvictOptions& o);
// UsageError unless the budget is at least 1 and holds the sinks and the recent window, the
// window and pool are positive, the pool odd, alpha in (0, 1], tau positive (tau_end too, or 0).
void check_evict_options(const EvictOptions& o);
// The KV cache tokens a context with eviction needs: n_seq sequences of the budget plus a
// forward chunk of n_batch (and a block of slack), or 0 (room for n_ctx each) when that is no
// smaller or eviction is off.
int64_t evict_capacity(const EvictOptions& o, int64_t n_ctx, int64_t n_batch, int64_t n_seq);
// "h2o (budget 1024, sinks 0, recent 512)", "snapkv (budget 2048, window 32, pool 7)", "none".
std::string describe(const EvictOptions& o);
// Whether the policy scores tokens by attention probabilities (all but streaming).
bool needs_attention(const EvictOptions& o);
// Whether it also reads the values' norms (VATP).
inline bool needs_value_norms(const EvictOptions& o) { return o.policy == EvictPolicy::VATP; }

// One sequence's attention statistics: acc[slot * stride + j] for each (layer, kv head) slot and
// cache index j < stride, added to by ops::attention_probs.
struct EvictScores {
  int64_t n_slots = 0, stride = 0;
  std::vector<float> acc;
  void reset(int64_t slots, int64_t capacity);
  float* slot(int64_t s) { return acc.data() + s * stride; }
  const float* slot(int64_t s) const { return acc.data() + s * stride; }
};

// Before a forward chunk adds the attention of a sequence's n queries: decays or clears the
// statistics of its len cached tokens as the policy does (A2SF: times alpha^n; SnapKV with
// n >= window: cleared) and writes each query's weight into weights[n] (A2SF: alpha^(n-1-t);
// SnapKV: 1 for the last `window` queries, else 0; otherwise 1).
void begin_chunk(const EvictOptions& o, EvictScores& s, int64_t len, int64_t n,
                 std::vector<float>& weights);

// The score of each of the n cached tokens, into out[n]: the statistics summed over slots
// (VATP: each slot's times value_norms[slot * n + j], the L1 norm of the token's value in that
// layer and kv head); SnapKV max-pools each slot's over `pool` neighbours first.
void token_scores(const EvictOptions& o, const EvictScores& s, int64_t n,
                  std::span<const float> value_norms, std::vector<float>& out);

// The cache indices (ascending) of the tokens a sequence of n > budget keeps: the first sinks,
// the last recent, and, for the rest of the budget, those of highest score (the earlier on a
// tie). Streaming passes no scores.
std::vector<int32_t> select_kept(const EvictOptions& o, int64_t n, std::span<const float> scores);

// After an eviction: each slot's statistics of the kept tokens moved to their new indices.
void compact(EvictScores& s, std::span<const int32_t> kept);

}  // namespace squeeze::kv
