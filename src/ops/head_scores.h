// How much each attention head matters to a chunk of prompt tokens, for dynamic head pruning in
// prefill (docs/POP.md): each head's attention is computed for a few probe queries of the
// chunk, and a score (higher: keep) summarises it. The scores adapt to heads what the papers
// score tokens by:
//   qk       - mean over probes of max_j cos(q, k_j): how closely the head's queries match
//              some key (the seed's query-key cosine similarity);
//   entropy  - mean over probes of 1 - H(p) / ln(n): how peaked its attention is (Keyformer
//              regularises token scores by this entropy);
//   vnorm    - mean over probes of sum_j p_j |v_j|_1: the value magnitude it pulls in (VATP
//              weighs attention by |v|_1);
//   a2sf     - A2SF's accumulated attention with a forgetting factor: per key, the probes'
//              attention summed in position order, earlier probes discounted by
//              0.9^(distance / 512) (the windowed decay for long inputs); the score is the
//              largest accumulated share, i.e. how much the head concentrates on heavy hitters.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "ops/attention.h"
#include "ops/kv_view.h"

namespace squeeze::ops {

enum class HeadScore { Qk, Entropy, VNorm, A2sf };
std::string_view head_score_name(HeadScore s);
HeadScore parse_head_score(std::string_view s);  // throws UsageError

struct HeadScoreScratch {
  std::vector<float> per_thread;
  std::vector<float> k_norm, v_norm;  // [n, n_head_kv]
  std::vector<float> probs;           // [n_probe, n_head, n] (a2sf)
};

// The per-row norms a score reads (|k_j| for qk, |v_j|_1 for vnorm) of cache rows [0, n) of
// kv, into scratch: once per run of queries, before head_scores on probes up to position n - 1.
void prepare_head_scores(const AttentionShape& shape, HeadScore kind, const KvView& kv, int64_t n,
                         ThreadPool& pool, HeadScoreScratch& scratch);

// score[h] for each of shape.n_head query heads, from the probe queries q + i * q_stride
// ([n_head * head_dim], rotary applied) at positions pos[i] (ascending) over the sequence's
// cache kv (cells 0..pos.back() filled), with shape's scale and window, after
// prepare_head_scores.
void head_scores(const AttentionShape& shape, HeadScore kind, const float* q, int64_t q_stride,
                 std::span<const int64_t> pos, const KvView& kv, float* score, ThreadPool& pool,
                 HeadScoreScratch& scratch);

// keep[h] = 1 for the k heads of highest score (ties: the lower index), 0 for the others.
void top_heads(std::span<const float> score, int64_t k, uint8_t* keep);
// The same by whole groups of `group` consecutive heads (a KV head's query heads): the k_groups
// groups of highest summed score keep all their heads, the others none.
void top_groups(std::span<const float> score, int64_t group, int64_t k_groups, uint8_t* keep);

}  // namespace squeeze::ops
