// Prefill-only layer skipping (POP, docs/POP.md): which layers a prompt skips. A set is given
// as layer ranges ("20-27,29") or as "auto:R", the first R of the layers in the order that
// `squeeze prune-prefill` calibrated and stored in the GGUF (metadata only: weights untouched,
// llama.cpp still loads the file).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace squeeze::sparsity {

// The stored calibration: layers in the order they are skipped (most skippable first), the
// score of each layer, how the order was found, and on what.
struct PrefillPlan {
  std::string score;          // "kld" (greedy on the continuation's KL), "bi", "last"
  std::vector<int32_t> order;  // a permutation of 0..n_layer-1
  std::vector<float> scores;  // [n_layer], the score's value per layer (lower: skipped first)
  std::string calib_file;
  int64_t calib_chunks = 0, calib_ctx = 0;

  void write(gguf::Writer& w) const;
  // The file's plan; empty order when it has none. Throws FormatError for a malformed one.
  static PrefillPlan read(const gguf::File& f, int64_t n_layer);
  // The metadata keys of a plan (a rewritten file drops the old ones).
  static bool is_key(std::string_view key);
};

// A stored head ranking for prefill head pruning (`squeeze heads -o`, `--head-score static`):
// per layer and query head the mean score of one kind on calibration text (higher: keep).
struct HeadRanking {
  std::string score;          // the kind it was made from (ops/head_scores.h)
  std::vector<float> scores;  // [n_layer * n_head]
  std::string calib_file;
  int64_t calib_chunks = 0, calib_ctx = 0;

  void write(gguf::Writer& w) const;
  // The file's ranking; empty scores when it has none. Throws FormatError for a malformed one.
  static HeadRanking read(const gguf::File& f, int64_t n_layer, int64_t n_head);
  static bool is_key(std::string_view key);
};

// [n_layer] flags, 1 = skipped in prefill, from "A-B,C,..." (layers 0-based, ranges inclusive)
// or "auto:R" (0 <= R <= 1, the first round(R * n_layer) of plan.order). "none" or "" is the
// empty set. Throws UsageError naming the problem.
std::vector<uint8_t> parse_prefill_skip(std::string_view spec, int64_t n_layer,
                                        const PrefillPlan& plan);

// "1-3,7" for the set (the inverse of the ranges form); "none" when empty.
std::string prefill_skip_text(const std::vector<uint8_t>& set);

}  // namespace squeeze::sparsity
