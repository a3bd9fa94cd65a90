// Activation sparsity at run time (TEAL, CATS): the thresholds of one target level, read from
// the file's table (sparsity/thresholds.h), and the column layouts (ops/sparse_gemv.h) of the
// matrices whose inputs become sparse, so that decoding one token reads only the weights of the
// activations that survive. Built once per model and shared, like the model; the per-sequence
// counters live in the context's scratch.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "ops/sparse_gemv.h"
#include "sparsity/thresholds.h"

namespace squeeze::model {

struct SparseLayer {
  std::array<float, sparsity::kTealSites> thresholds{};  // per site of the method, at the chosen level
  // CATS's cut in gate space: |SiLU(g)| >= t  <=>  g >= keep_above, or g within
  // [keep_neg_lo, keep_neg_hi] (SiLU's negative dip, empty when t exceeds its depth 0.278).
  // ReLU: keep_above = the smallest positive float, empty dip.
  float keep_above = 0, keep_neg_lo = 1, keep_neg_hi = 0;
  bool keep_gate(float g) const { return g >= keep_above || (g >= keep_neg_lo && g <= keep_neg_hi); }
  // Column layouts of the matrices read with a sparse input (empty where unused, or where the
  // weight format has none: those run densely on the zeroed input).
  ops::ColumnWeights wq, wk, wv, wo, gate, up, down;
  // TEAL: q/k/v (and gate/up), which share their input, as one matrix of stacked rows when
  // their formats match (then wq, wk, wv (gate, up) stay empty): each kept input's weights are
  // one longer run and the product one work item per thread.
  ops::ColumnWeights qkv, gate_up;
};

// The output head's sparsity (TEAL tables with head thresholds, when asked for).
struct SparseHead {
  bool on = false;
  double level = 0;
  float t = 0;              // |x| < t zeroed at the head's input
  ops::ColumnWeights cols;  // the head's column layout (empty: dense on the zeroed input)
};

class ActSparsity {
 public:
  // The file's thresholds at level `target` (a level of its table; 0 is allowed and means no
  // zeroing but the same code path), and, when head_target is set, the head's thresholds at that
  // level. Throws UsageError when the file has no table, no such level or (head_target) no head
  // thresholds, FormatError when the table does not fit the model.
  ActSparsity(const Model& m, double target, ThreadPool& pool,
              std::optional<double> head_target = std::nullopt);
  // The same from a table not (yet) in the file, e.g. while calibrating. column_layouts false:
  // thresholds only, for runs that decode batches (calibration), which never read the layouts.
  ActSparsity(const Model& m, sparsity::ThresholdTable table, double target, ThreadPool& pool,
              std::optional<double> head_target = std::nullopt, bool column_layouts = true);

  // Calibration: replaces layer il's thresholds (per site of the method; CATS's gate cut
  // follows its one threshold).
  void set_thresholds(int64_t il, const std::array<float, sparsity::kTealSites>& t);

  sparsity::Method method() const { return table_.method; }
  double level() const { return level_; }
  const SparseLayer& layer(int64_t il) const { return layers_[il]; }
  const SparseHead& head() const { return head_; }
  // Bytes held by the column layouts (on top of the mapped file).
  size_t bytes() const;
  // Matrices that run densely at decode because their format has no column layout.
  int64_t n_dense_fallback() const { return n_dense_fallback_; }

 private:
  sparsity::ThresholdTable table_;
  double level_;
  std::vector<SparseLayer> layers_;
  SparseHead head_;
  int64_t n_dense_fallback_ = 0;
};

// Counts of activations kept and seen per site, for reporting the achieved density.
struct SparsityCounters {
  std::array<uint64_t, sparsity::kTealSites> kept{};
  std::array<uint64_t, sparsity::kTealSites> seen{};
  uint64_t head_kept = 0, head_seen = 0;  // the output head's input (SparseHead)
  // Weight bytes of the blocks' matrices (not the head) that the products read, as each
  // product counts them from what it skips (ops::sparse_bytes_read; a dense product reads its
  // whole matrix, once per batch), and what the dense products would have read.
  uint64_t block_bytes_read = 0, block_bytes_dense = 0;
  // Prefill head pruning (HeadPruning): query heads x tokens whose attention ran, and in all.
  uint64_t attn_heads_run = 0, attn_heads_seen = 0;
  // Seconds spent in attention (the scores, softmax and P.V of every layer, head scoring
  // included): bench reports it beside prefill time.
  double attn_seconds = 0;
  void reset() {
    kept.fill(0);
    seen.fill(0);
    head_kept = head_seen = 0;
    block_bytes_read = block_bytes_dense = 0;
    attn_heads_run = attn_heads_seen = 0;
    attn_seconds = 0;
  }
  // block_bytes_read / block_bytes_dense (0 when nothing ran).
  double block_read_fraction() const;
  // Kept / seen at one site (0 when nothing was seen).
  double density(int site) const;
  double head_density() const;
  // Over all sites, weighted by the weights each site's activations multiply (per `m`).
  double weighted_density(const Model& m, sparsity::Method method) const;
};

// The density of the weights read when the sites keep `density` (per site, method's order):
// each site weighted by the weights its activations multiply (q/k/v, o, gate/up, down for
// TEAL; CATS's one site is its density).
double weighted_density(const Model& m, sparsity::Method method,
                        const std::array<double, sparsity::kTealSites>& density);

// Zeroes x[i] with |x[i]| < t, writes the indices of the others (ascending) to idx and returns
// their count.
int64_t apply_threshold(float* x, int64_t n, float t, int32_t* idx);

// Sets S's gate-space cut for CATS threshold t: keep_gate(g) == !(|silu_for_threshold(g)| < t).
void set_gate_interval(SparseLayer& S, float t);

// SiLU as the threshold sees it (x / (1 + e^-x)); CATS compares |silu(gate)| with t.
inline float silu_for_threshold(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace squeeze::model
