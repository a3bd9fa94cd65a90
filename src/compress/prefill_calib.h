// Choosing the layers POP skips in prefill (docs/POP.md): each layer scored on calibration
// text, an order of the layers (most skippable first) stored in a copy of the model
// (sparsity::PrefillPlan; weights untouched), from which `--prefill-skip auto:R` takes the
// first R. Scores:
//   kld  - what skipping costs the continuation: each chunk's first half is prefilled with the
//          layers skipped, the second half runs every layer through the KV cache that left, and
//          its next-token distributions are compared with the dense model's (mean KL(dense ||
//          pruned)). One layer at a time gives each layer's score; the order is then greedy:
//          at each step, of the `candidates` remaining layers of lowest single score, the one
//          whose addition to the set chosen so far costs least.
//   bi   - ShortGPT's block influence, 1 - cos(layer input, layer output), mean over the dense
//          model's tokens: layers that change the residual stream least first.
//   last - the last layers first (no calibration).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/context.h"
#include "model/model.h"
#include "sparsity/prefill_plan.h"

namespace squeeze::compress {

// (stage, done, total) after each step of a calibration.
using CalibProgress = std::function<void(const std::string& stage, int64_t done, int64_t total)>;

struct PrefillCalibOptions {
  std::string score = "kld";  // kld, bi, last
  int64_t n_chunks = 4;       // calibration chunks of ctx tokens, from the text's start
  int64_t ctx = 512;          // the prompt is the first half
  int64_t candidates = 6;     // kld: layers tried per greedy step
  double max_fraction = 0.5;  // kld: greedy steps up to this fraction of the layers; the rest by single score
  CalibProgress progress;  // after each evaluation
  const std::atomic<bool>* cancel = nullptr;
};

struct PrefillCalibResult {
  sparsity::PrefillPlan plan;
  // kld: the calibration KL with the first k + 1 layers of plan.order skipped, for the greedy
  // steps (k = 0 .. steps - 1).
  std::vector<double> greedy_kld;
  int64_t evaluations = 0;  // pruned runs over the calibration chunks
};

// ShortGPT's block influence per layer: 1 - cos(layer input, layer output), the mean over every
// token of n_chunks chunks of ctx tokens of `tokens` (each chunk run from an empty cache).
// Throws Interrupted on cancel.
std::vector<float> block_influence(const model::Model& m, std::span<const int32_t> tokens,
                                   int64_t n_chunks, int64_t ctx, ThreadPool& pool,
                                   const CalibProgress& progress, const std::atomic<bool>* cancel);

// Throws UsageError for bad options (before any work: a command checks them first).
void check_options(const model::Model& m, const PrefillCalibOptions& o);

// Throws UsageError for bad options or a text shorter than n_chunks * ctx tokens, Interrupted
// on cancel.
PrefillCalibResult calibrate_prefill(const model::Model& m, std::span<const int32_t> tokens,
                                     const PrefillCalibOptions& o, ThreadPool& pool);

// The mean KL(dense || pruned) of the continuation rows for one skip set (the kld score's
// measure), on the chunks of `tokens`: for tests and for reporting a chosen set.
class PrefillKld {
 public:
  PrefillKld(const model::Model& m, std::span<const int32_t> tokens, int64_t n_chunks,
             int64_t ctx, ThreadPool& pool);
  double kld(const std::vector<uint8_t>& skip);

 private:
  const model::Model& m_;
  ThreadPool& pool_;
  int64_t n_chunks_, ctx_, first_, n_rows_;
  std::vector<int32_t> tokens_;  // [n_chunks * ctx]
  std::vector<float> dense_;     // [n_chunks, n_rows, n_vocab] log-probabilities
  model::Context context_;
};

// src with the plan's metadata (an older plan replaced), written atomically.
void write_prefill_plan(const gguf::File& src, const sparsity::PrefillPlan& plan,
                        const std::string& out_path, const std::atomic<bool>* cancel);

}  // namespace squeeze::compress
