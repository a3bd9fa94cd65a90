// Activation-sparsity thresholds as stored in a GGUF file (written by `squeeze sparsify`, read
// at load time): for every layer, every sparsified site and every target sparsity level, the
// magnitude below which an activation is set to zero. Weights are untouched; the table lives in
// metadata (not tensors) so llama.cpp still loads the file. See docs/SPARSITY.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace squeeze::sparsity {

enum class Method {
  Teal,  // |x| < t zeroed at the inputs of q/k/v, o, gate/up and down (TEAL, Liu et al. 2024)
  Cats,  // |SiLU(gate)| < t zeroed; up and down then skip those neurons (CATS, Lee et al. 2024)
  Relu,  // SiLU replaced by ReLU without training (ProSparse's first step): gate <= 0 dropped;
         // no thresholds (one level, 0)
};

std::string_view method_name(Method m);
Method parse_method(std::string_view s);  // throws UsageError

// TEAL's sites, in table order: the input each threshold applies to.
enum TealSite : int { kAttnIn = 0, kAttnOut = 1, kFfnIn = 2, kFfnAct = 3, kTealSites = 4 };
// CATS and ReLU have one site: the activated gate of the intermediate.
enum CatsSite : int { kGateAct = 0, kCatsSites = 1 };

int n_sites(Method m);
std::string_view site_name(Method m, int site);  // "attn_in", "attn_out", "ffn_in", "ffn_act", "gate_act"

struct ThresholdTable {
  Method method = Method::Teal;
  std::string allocation = "uniform";
  int64_t n_layer = 0;
  std::vector<float> levels;      // target sparsities, ascending, in [0, 1)
  std::vector<float> thresholds;  // [n_layer][n_sites][levels.size()]
  // TEAL only, optional: thresholds on the output head's input (the final norm's output), one
  // per level; empty when the file has none. TEAL sparsifies only the blocks; on a small model
  // the head is a fifth of the weights, so squeeze calibrates it too and applies it only when
  // asked (--head-sparsity).
  std::vector<float> head;
  float default_level = 0.5f;

  int sites() const { return n_sites(method); }
  float& at(int64_t layer, int site, size_t level) {
    return thresholds[(static_cast<size_t>(layer) * sites() + site) * levels.size() + level];
  }
  float at(int64_t layer, int site, size_t level) const {
    return thresholds[(static_cast<size_t>(layer) * sites() + site) * levels.size() + level];
  }
  // ReLU's table: one level 0 with zero thresholds (the cut is gate > 0).
  static ThresholdTable relu(int64_t n_layer);
  // The index of the level equal to s (within 1e-4); throws UsageError listing the range when
  // the table has no such level.
  size_t level_index(double s) const;

  // Adds the squeeze.sparsity.* keys (table and provenance are the caller's other keys).
  void write(gguf::Writer& w) const;
  // The table of a file, or nullopt when it has none. Throws FormatError when the keys are
  // inconsistent (sizes, order, non-finite or negative thresholds).
  static std::optional<ThresholdTable> read(const gguf::File& f);
};

// The levels `squeeze sparsify` stores: 0.00, 0.01, ..., 0.99.
std::vector<float> standard_levels();

}  // namespace squeeze::sparsity
