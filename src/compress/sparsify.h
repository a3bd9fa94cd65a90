// squeeze sparsify: activation-sparsity thresholds (TEAL, CATS) from calibration text.
//
// The model runs densely on calibration windows; at every sparsified site of every layer a
// histogram of |activation| (sparsity/histogram.h) gives the threshold of each level 0.00 ..
// 0.99 as the level-quantile (uniform allocation: every site of every layer at the target), as
// TEAL calibrates. Sparsifying a site shifts the distributions of the sites after it (the
// product of two sparsified projections is smaller, so more of it falls under a dense-model
// threshold), so the levels asked for are then refined: the model runs again sparsified at that
// level and each threshold becomes the level-quantile of what its site sees in that run (the
// sequential scheme GPTQ uses for its inputs). Last, the model runs sparsified at each asked
// level on held-back windows, from a part of the text the thresholds never saw, and the density
// each site reaches is reported. With greedy allocation (TEAL) a level's sparsity is shared
// unevenly among a block's sites, found per block by TEAL's greedy search on the block's output
// error; every step above then uses each site's own share. TEAL tables also hold thresholds for
// the output head's input,
// calibrated the same way (applied at run time only when asked: --head-sparsity). The weights
// are copied unchanged; the table goes into metadata
// (sparsity/thresholds.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "sparsity/thresholds.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::compress {

struct SparsifyOptions {
  sparsity::Method method = sparsity::Method::Teal;
  // Levels refined and checked on held-back text (multiples of 0.01 in 0..0.99); the first is
  // the file's default.
  std::vector<double> levels = {0.5};
  int refine_passes = 1;  // sparsified re-calibration runs per asked level
  // TEAL only: share each level among the four sites of every block by TEAL's block-wise greedy
  // search (sparsify.cpp) instead of every site at the level.
  bool greedy = false;
  double greedy_step = 0.05;   // block sparsity (weighted by weights) added per greedy step
  int64_t greedy_samples = 2;  // calibration windows the block errors are measured on
  int64_t n_samples = 32;
  int64_t ctx = 512;
  int64_t heldout_samples = 8;
  uint64_t seed = 1234;
  // Fraction of the text (from the start, cut at a line end) the thresholds come from; the
  // rest is held back for the density check.
  double calib_fraction = 0.8;
  std::function<void(const std::string& stage, int64_t done, int64_t total)> progress;
  const std::atomic<bool>* cancel = nullptr;
};

struct SparsifyResult {
  sparsity::ThresholdTable table;
  // Greedy allocation: the sparsity of each site at each table level,
  // [(layer * sites + site) * levels + level]; empty for uniform.
  std::vector<double> allocation;
  std::string text_hash;
  int64_t calib_tokens = 0;    // tokens the histograms saw (samples x ctx)
  int64_t heldout_tokens = 0;
  // Density reached at each asked level (opts.levels order) on held-back text, per site and
  // weighted by weights.
  std::vector<std::array<double, sparsity::kTealSites>> heldout_density;
  std::vector<double> heldout_weighted_density;
  // TEAL: the density of the output head's input at each asked level (its head thresholds).
  std::vector<double> heldout_head_density;
  // At the default level, when several sequences decode together a weight column is needed if
  // any of them keeps its activation: the density of the union over b held-back tokens (from b
  // different windows at the same position where there are enough windows), per site.
  std::vector<int64_t> batch_sizes;
  std::vector<std::array<double, sparsity::kTealSites>> batch_density;
  std::vector<double> batch_weighted_density;
};

// Throws UsageError for bad options or too short a text, Interrupted on cancel.
SparsifyResult calibrate_sparsity(const model::Model& m, const tokenizer::Tokenizer& tok,
                                  const std::string& text, const SparsifyOptions& opts,
                                  ThreadPool& pool);

// Writes src's tensors unchanged with the table and provenance keys through a temporary file.
void write_sparsified(const gguf::File& src, const SparsifyResult& r, const SparsifyOptions& opts,
                      const std::string& calib_file, const std::string& out_path,
                      const std::atomic<bool>* cancel);

}  // namespace squeeze::compress
