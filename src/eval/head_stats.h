// Per-layer, per-head importance of every head score (ops/head_scores.h) on text, for
// `squeeze heads` (docs/POP.md): the dense model runs chunks of the text, and each layer's
// query heads are scored on probe queries spread over every head chunk of a chunk (as prefill
// head pruning scores them), the scores averaged over all of them.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "ops/head_scores.h"

namespace squeeze::eval {

inline constexpr std::array<ops::HeadScore, 4> kHeadScores = {
    ops::HeadScore::Qk, ops::HeadScore::Entropy, ops::HeadScore::VNorm, ops::HeadScore::A2sf};

struct HeadStats {
  int64_t n_layer = 0, n_head = 0, n_chunks = 0, tokens = 0;
  // Per score kind (kHeadScores order): [n_layer * n_head] mean scores.
  std::array<std::vector<float>, kHeadScores.size()> score;
  float at(size_t kind, int64_t layer, int64_t head) const {
    return score[kind][static_cast<size_t>(layer * n_head + head)];
  }
};

struct HeadStatsOptions {
  int64_t ctx = 512;      // tokens per chunk
  int64_t n_chunks = 4;   // from the text's start
  int64_t head_chunk = 256;
  int64_t probes = 8;     // per head chunk
  std::function<void(int64_t done, int64_t total)> progress;
  std::function<bool()> interrupted;  // checked between chunks: throws Error("interrupted")
};

// Throws UsageError when the text is shorter than n_chunks * ctx tokens.
HeadStats head_stats(const model::Model& m, std::span<const int32_t> tokens,
                     const HeadStatsOptions& o, ThreadPool& pool);

}  // namespace squeeze::eval
