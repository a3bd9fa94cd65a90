// Unstructured and N:M weight pruning of one matrix: which weights become zero.
//   magnitude  score |w_ij| (the classical baseline), compared within each output row;
//   wanda      score |w_ij| · ‖x_j‖₂ (Sun et al., 2023, "A Simple and Effective Pruning
//              Approach for Large Language Models"), ‖x_j‖₂² = H_jj of the calibration
//              Hessian H = Σ x xᵀ, compared within each output row as the paper does; no update
//              of the weights that stay;
//   sparsegpt  (Frantar and Alistarh, 2023, "SparseGPT: Massive Language Models Can Be
//              Accurately Pruned in One-Shot") runs inside GPTQ's loop (gptq.h): per block of
//              128 columns the mask takes the lowest w² / [U]_jj² (U the upper Cholesky factor
//              of H⁻¹) over the whole block (all rows, as the reference code does), and every
//              pruned or rounded weight's error moves onto the columns not yet reached.
// Patterns: a fraction of zeros, or N:M (N zeros in every M consecutive weights of a row: 2:4
// is what sparse tensor cores run; 4:8 loses less).
//
// Zeros must survive the storage type: pruned matrices are stored in symmetric grids (q8_0,
// q4_0, symmetric sq types), where 0 is a code; asymmetric ones are refused.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"

namespace squeeze::compress {

enum class PruneMethod { None, Magnitude, Wanda, SparseGpt };
PruneMethod parse_prune_method(std::string_view name);  // throws UsageError
std::string_view prune_method_name(PruneMethod m);

struct PruneSpec {
  PruneMethod method = PruneMethod::None;
  double sparsity = 0.0;  // unstructured: the fraction of zeros, in (0, 1)
  int n = 0;              // N:M: n zeros in every m consecutive weights of a row
  int m = 0;              // 0: unstructured
  // Per-layer fractions (unstructured), [n_layer]; empty: every layer at `sparsity`. Set from
  // --layer-sparsity or by OWL (owl_sparsities).
  std::vector<double> layer_sparsity;
  bool active() const { return method != PruneMethod::None; }
  // This spec with layer il's fraction (il < 0: a matrix outside the blocks, the uniform one).
  PruneSpec for_layer(int64_t il) const;
  bool nm() const { return m > 0; }
  bool needs_hessian() const { return method == PruneMethod::Wanda || method == PruneMethod::SparseGpt; }
  // The fraction of zeros the pattern sets.
  double fraction() const { return nm() ? static_cast<double>(n) / m : sparsity; }
};

// "N:M" into spec.n, spec.m. Throws UsageError.
void parse_nm_pattern(std::string_view text, PruneSpec& spec);
// Throws UsageError for a spec that cannot be honoured: sparsity outside (0, 1), n outside
// [1, m), m not dividing 128 (SparseGPT's block).
void check_prune_spec(const PruneSpec& s);
// OWL (Yin et al., 2023, "Outlier Weighed Layerwise Sparsity"): layers with more outliers
// (weights whose Wanda score, or |w| for magnitude, exceeds m times their layer's mean score)
// keep more weights. The layers' outlier ratios, scaled to a spread of 2 * lambda, shifted so
// their mean density is 1 - target: layer il's sparsity = target - (d_il - mean d), each within
// [target - lambda, target + lambda].
struct OwlOptions {
  bool on = false;
  double m = 5.0;
  double lambda = 0.08;
};
// The fraction of scores[0..n) above m times their mean.
double outlier_ratio(const std::vector<const std::vector<float>*>& scores, double m);
std::vector<double> owl_sparsities(const std::vector<double>& outlier_ratios, double target,
                                   double lambda);

// Per-layer fractions from repeatable "RANGES=F" items (--layer-sparsity 0-9=0.3; ranges as in
// core/layer_ranges.h; a later item wins where they overlap), every other layer at `base`.
// Throws UsageError.
std::vector<double> parse_layer_sparsity(const std::vector<std::string>& items, int64_t n_layer,
                                         double base);

// "50% unstructured" / "2:4".
std::string prune_pattern_text(const PruneSpec& s);

// Zeros among `count` weights at fraction s (rounded to nearest).
int64_t zeros_among(double s, int64_t count);

// Per-weight scores of magnitude or Wanda (larger: kept), [rows, cols]. h: the Hessian
// [cols, cols] (Wanda only).
std::vector<float> prune_scores(const float* w, int64_t rows, int64_t cols, PruneMethod method,
                                const std::vector<double>* h);

// mask[r * cols + c] = 1 for the weights pruned: in every row the zeros_among(sparsity, cols)
// lowest scores, or under N:M the n lowest of every m. Ties go to the lower column.
std::vector<uint8_t> row_mask(const float* scores, int64_t rows, int64_t cols,
                              const PruneSpec& s, ThreadPool& pool);

// The k lowest of scores[0..n) marked 1 in mask (ties to the lower index).
void mark_lowest(const float* scores, int64_t n, int64_t k, uint8_t* mask);

}  // namespace squeeze::compress
