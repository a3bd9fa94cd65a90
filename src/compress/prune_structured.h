// Structured pruning of the feed-forward networks: whole neurons (row j of ffn_gate and ffn_up
// with column j of ffn_down) leave every layer, the same number in each, so the result is a
// smaller dense model of the same architecture (feed_forward_length lowered) that llama.cpp
// loads as it is. A neuron's importance, summed over its three weight groups:
//   magnitude  Σ|w| (LLM-Pruner's element-wise L1 of the group);
//   wanda      Σ|w| · ‖x‖₂ of each weight's input channel (Wanda-sp, An et al., 2024, the
//              structured form of Wanda): the gate/up rows against the FFN input's channel
//              norms, the down column against the neuron's own activation norm, both from the
//              diagonals of the calibration Hessians, on the dense model (one calibration pass).
// The gate and up rows kept are copied byte for byte; ffn_down loses columns, so its rows are
// decoded and stored again as q8_0 (nearly lossless; docs/PRUNING.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "compress/prune.h"
#include "core/thread_pool.h"

namespace squeeze::compress {

struct FfnPruneOptions {
  PruneMethod method = PruneMethod::Magnitude;  // magnitude or wanda
  // Of every layer's neurons removed; the width kept is rounded to a multiple of 32 (a block
  // of ffn_down's rows), at least 32.
  double fraction = 0.25;
  std::string calib_path;  // wanda
  int64_t calib_samples = 128;
  int64_t calib_ctx = 512;
  uint64_t seed = 0;
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(const std::string& line, bool transient)> log;
};

struct FfnPruneStats {
  int64_t n_ff_before = 0;
  int64_t n_ff_after = 0;
  uint64_t params_before = 0;  // every tensor's elements
  uint64_t params_after = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
};

// The width kept of n_ff neurons when `fraction` of them go (multiple of 32, at least 32).
int64_t ffn_width_kept(int64_t n_ff, double fraction);

// Checks the options and the model (UsageError: MoE, no FFN, bad fraction), then writes the
// pruned model to out_path. Throws Interrupted on cancel.
FfnPruneStats prune_ffn_neurons(const std::string& model_path, const std::string& out_path,
                                const FfnPruneOptions& o, ThreadPool& pool);

}  // namespace squeeze::compress
