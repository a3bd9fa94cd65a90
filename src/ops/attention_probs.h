// The attention probabilities of some queries summed per cache row: what KV-cache eviction
// policies (kv/evict.h) score tokens by. Computed apart from attention() (which keeps them in its
// tiles and never writes them out), with the same Q.K and softmax kernels, only when a policy asks.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "ops/attention.h"
#include "ops/kv_view.h"

namespace squeeze::ops {

// acc[hk * stride + j] += sum over tokens t (weight w[t], 1 without weights; tokens of weight 0
// are skipped) and the query heads h of kv head hk of p_{t,h}(j), the probability attention()
// gives cache row j for token t at position pos0 + t (causal, within shape.window).
struct ProbSums {
  float* acc = nullptr;       // [n_head_kv, stride], stride > pos0 + n_tokens - 1
  int64_t stride = 0;
  const float* weights = nullptr;  // [n_tokens] or null
  // Keyformer's Gumbel softmax in place of the probabilities when tau > 0: softmax_j((s_j +
  // g_j) / tau_t) of the scaled scores s_j, g_j = gumbel_noise(seed, pos0 + t, h, j), at the
  // temperature tau_t = tau + tau_step * (pos0 + t) of the query's position.
  float tau = 0;
  float tau_step = 0;
  uint64_t seed = 0;
};

// A standard Gumbel sample, -log(-log(u)), u uniform in (0, 1) drawn from a hash of the four
// numbers: the same noise for the same query position, head and key, whatever the threads.
float gumbel_noise(uint64_t seed, int64_t query, int64_t head, int64_t key);

// q: [n_tokens, n_head * head_dim], rotary applied (scaled already when shape.scale is 1).
void attention_probs(const AttentionShape& shape, const float* q, int64_t n_tokens, int64_t pos0,
                     const KvView& kv, const ProbSums& sums, ThreadPool& pool,
                     std::vector<float>& scratch);

}  // namespace squeeze::ops
