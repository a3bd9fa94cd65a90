// Calibrated quantization of a whole model: the weight matrices of every transformer block
// (attn_q/k/v/output, ffn_gate/up/down) by round-to-nearest with a chosen scale method or by
// GPTQ on Hessians from calibration text (calib.h, block by block on the already-quantized
// model's activations), optionally pruned first or jointly (prune.h); the embedding and
// output head by their own type (kept as they are by
// default); any tensor by an override type chosen by regular expression. Provenance goes into
// squeeze.quantization.* metadata. Output through a temporary file (output.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "compress/gptq.h"
#include "compress/group_quant.h"
#include "core/thread_pool.h"
#include "formats/format.h"
#include "gguf/gguf.h"

namespace squeeze::compress {

enum class QuantMethod { Rtn, Gptq };

// A tensor's type given by the user instead of the method: a llama.cpp or squeeze type
// (plain round-to-nearest with its reference quantizer) or `keep` (copied unchanged).
struct TypeChoice {
  bool keep = true;
  formats::DType type = formats::DType::F16;
};
// "keep" or a type name with a reference quantizer ("q8_0", "f16", "sq3_g64", ...). Throws
// UsageError naming the choices.
TypeChoice parse_type_choice(std::string_view name);

struct TensorTypeOverride {
  std::string pattern;  // Perl-compatible regular expression (PCRE2), searched in the name
  TypeChoice choice;
  std::shared_ptr<const void> re;  // the compiled pattern (pcre2_code)
  // Whether the pattern matches somewhere in `name`.
  bool matches(const std::string& name) const;
};
// "REGEX=TYPE" (the last '=' splits). Throws UsageError for a bad expression or type.
TensorTypeOverride parse_tensor_type(std::string_view spec);

struct QuantizeOptions {
  QuantMethod method = QuantMethod::Rtn;
  GptqOptions gptq;  // gptq.scheme is the scheme of both methods
  // Pruning of the method's matrices before (magnitude, Wanda: masks, then RTN) or during
  // (SparseGPT: GPTQ's loop with the mask) their quantization; needs method Rtn and a
  // symmetric scheme. Provenance in squeeze.pruning.*.
  PruneSpec prune;
  // --layer-sparsity items ("RANGES=F", prune.h), or OWL's allocation (an extra calibration
  // pass on the dense model for Wanda and SparseGPT); unstructured only.
  std::vector<std::string> layer_sparsity;
  OwlOptions owl;
  // Store the pruned matrices in the packed sparse format sp8_50 (formats/sparse.h) instead of
  // q8_0: needs 8-bit g32 symmetric and an N:M pattern with N >= M / 2, M dividing 32.
  bool packed = false;
  std::vector<TensorTypeOverride> overrides;  // first match wins
  // --embd-type and --output-type; unset: not given. See type_rule() for who wins.
  std::optional<TypeChoice> embd;    // token_embd.weight
  std::optional<TypeChoice> output;  // the output head: output.weight, or token_embd.weight if tied
  // Calibration (GPTQ, Wanda and SparseGPT).
  std::string calib_path;
  int64_t calib_samples = 128;
  int64_t calib_ctx = 512;
  uint64_t seed = 0;
  const std::atomic<bool>* cancel = nullptr;
  // A line of progress for the user (no newline).
  std::function<void(const std::string& line, bool transient)> log;
};

struct QuantizeStats {
  size_t n_tensors = 0;
  size_t n_method = 0;    // quantized by RTN / GPTQ
  size_t n_override = 0;  // converted to an override / embd / output type
  size_t n_fallback = 0;  // stored with a smaller group than asked (row length)
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t quantized_weights = 0;  // elements written by the method
  uint64_t quantized_bytes = 0;    // their bytes
  double mean_rel_error = 0.0;     // calibrated: mean over matrices of ||ΔW X||² / ||W X||²
  // The same for the baseline the method is compared with: RTN with the same scheme for
  // GPTQ; magnitude pruning (then RTN) for Wanda and SparseGPT.
  double mean_rel_error_base = 0.0;
  uint64_t pruned_weights = 0;     // weights the pruning set to zero
};

// What sets a tensor's type instead of the method, in llama-quantize's order (llama_tensor_get_type
// and llama_tensor_get_type_impl in llama.cpp's src/llama-quant.cpp):
// - token_embd.weight: --embd-type; else the first matching --tensor-type; else, when the model
//   has no output.weight (its head is tied to the embedding), --output-type.
// - output.weight: --output-type; else the first matching --tensor-type.
// - any other tensor: the first matching --tensor-type.
// choice == nullptr: no rule (block matrices go to the method, the rest is copied).
// On a tied model --embd-type and --output-type both name token_embd.weight; giving both is an
// error (quantize_model throws UsageError; llama-quantize silently takes the embedding type).
struct TypeRule {
  const TypeChoice* choice = nullptr;
  std::string source;  // "--embd-type", "--output-type (tied head)", "--tensor-type REGEX", ...
};
TypeRule type_rule(const std::string& name, bool tied_output, const QuantizeOptions& o);

// Checks every option and every tensor's storage before any work (UsageError), then
// quantizes `model_path` into out_path. Throws Interrupted on cancel.
QuantizeStats quantize_model(const std::string& model_path, const std::string& out_path,
                             const QuantizeOptions& o, ThreadPool& pool);

}  // namespace squeeze::compress
