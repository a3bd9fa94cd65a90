// Structured pruning: whole units leave the model, so the result is a smaller dense model of
// the same architecture that llama.cpp loads as it is. The same count of units goes from every
// layer (llama.cpp's llama models read one head count and one feed-forward length), each layer
// choosing its own by the criterion:
//   ffn     feed-forward neurons: row j of ffn_gate and ffn_up with column j of ffn_down
//           (feed_forward_length lowered; the width kept a multiple of 32);
//   heads   KV groups: a key/value head with the query heads that read it (rows of attn_q,
//           attn_k, attn_v and their biases, columns of attn_output; head_count and
//           head_count_kv lowered, key_length / value_length written);
//   layers  whole blocks (block_count lowered, the blocks after renumbered).
// Criteria for neurons and heads:
//   magnitude  Σ|w| over the unit's weights (LLM-Pruner's element-wise L1 of the group);
//   wanda      Σ|w| · ‖x‖₂ of each weight's input channel (Wanda-sp, An et al., 2024): rows
//              against their input's channel norms (ffn_norm / attn_norm), the down / output
//              columns against the unit's own activation norms (ffn_act / kqv_out), from the
//              diagonals of the calibration Hessians of the dense model (one pass);
//   flap       FLAP's fluctuation (An et al., 2024): Σ over the unit's channels c of the
//              down / output projection's input of Var(x_c) · ‖W[:, c]‖², on the dense model's
//              calibration tokens, with bias compensation: what the removed channels' means
//              contributed, W[:, removed] · mean(x_removed), goes into ffn_down.bias /
//              attn_output.bias (which llama.cpp's llama models read). Widths stay uniform
//              (FLAP's adaptive per-layer widths need per-layer arrays; not done);
//   taylor     (neurons only) LLM-Pruner's first-order Taylor importance Σ|w · ∂L/∂w| over the
//              neuron's weights, the next-token loss's gradients through the head with the
//              later blocks frozen (compress/taylor.h).
// For layers, ShortGPT's block influence (1 - cos(layer input, layer output) on the dense
// model's calibration tokens, compress/prefill_calib.h): the lowest go.
// Rows kept are copied byte for byte; a matrix that loses columns keeps its blocks where a
// unit's columns are whole blocks of its type (attn_output of q4/q5/q8 types, head_dim 64)
// and is otherwise decoded and stored again as q8_0 (nearly lossless; docs/PRUNING.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace squeeze::compress {

enum class Structure { Ffn, Heads, Layers };
enum class Criterion { Magnitude, Wanda, Flap, Taylor, BlockInfluence };

// "ffn", "heads", "layers"; UsageError otherwise.
Structure parse_structure(std::string_view name);
std::string_view structure_name(Structure s);
// "magnitude", "wanda", "flap" (ffn, heads), "taylor" (ffn) or "bi" (layers); UsageError otherwise or when the
// criterion does not rank the structure's units.
Criterion parse_criterion(Structure s, std::string_view name);
std::string_view criterion_name(Criterion c);

struct StructuredPruneOptions {
  Structure structure = Structure::Ffn;
  Criterion criterion = Criterion::Magnitude;
  // Of every layer's neurons / KV groups, or of the layers, removed (rounded to whole units:
  // neurons in groups of 32; at least one unit removed and one kept).
  double fraction = 0.25;
  std::string calib_path;  // every criterion but magnitude
  int64_t calib_samples = 128;
  int64_t calib_ctx = 512;
  uint64_t seed = 0;
  // ffn: the neurons each layer keeps (ascending, the same count in every layer) instead of
  // the criterion's choice (per-domain masks, compress/domains.h); no calibration then.
  std::vector<std::vector<int64_t>> keep;
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(const std::string& line, bool transient)> log;
};

struct StructuredPruneStats {
  int64_t units_before = 0;  // per layer (neurons, KV groups), or layers
  int64_t units_after = 0;
  std::vector<int64_t> layers_removed;  // layers: ascending, source numbering
  std::vector<std::vector<int64_t>> kept;  // ffn: each layer's neurons kept, ascending
  uint64_t params_before = 0;           // every tensor's elements
  uint64_t params_after = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
};

// Units kept of n when `fraction` of them go: neurons a multiple of 32 (at least 32); KV
// groups and layers at least one. Throws UsageError when none would go.
int64_t ffn_width_kept(int64_t n_ff, double fraction);
int64_t units_kept(int64_t n, double fraction, const char* what);

// Checks the options and the model (UsageError: MoE, missing tensors, bad fraction, nothing to
// remove), then writes the pruned model to out_path. Throws Interrupted on cancel.
StructuredPruneStats prune_structured(const std::string& model_path, const std::string& out_path,
                                      const StructuredPruneOptions& o, ThreadPool& pool);

// UsageError for options that cannot go together (before any work).
void check_structured_options(const StructuredPruneOptions& o);

// The pruned model of m, unwritten (prune_structured's work without the file); st filled.
gguf::Writer build_structured(const model::Model& m, const StructuredPruneOptions& o, ThreadPool& pool,
                              StructuredPruneStats& st);

}  // namespace squeeze::compress
