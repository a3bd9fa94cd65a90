// The calibration runner: runs a model on calibration text one transformer block at a time
// and collects, for each block, the Hessians H = Σ x xᵀ (accumulated in float64) of the inputs of its weight
// matrices. GPTQ's sequential scheme: every sample's hidden state is kept between blocks, so
// once block L's weights are replaced by their quantized versions, advance(L) runs the
// quantized block and block L+1 sees the inputs the quantized model produces. Memory: the
// hidden states (samples × ctx × n_embd floats) and one block's Hessians.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::calib {

struct CalibSamples {
  std::vector<std::vector<int32_t>> samples;  // each: BOS + ctx - 1 tokens of the text
  std::string text_hash;                      // FNV-1a 64 of the text's bytes, hex
  int64_t text_tokens = 0;
};

// n_samples windows of ctx tokens at seeded random offsets of the tokenized text, each
// starting with BOS. Throws UsageError when the text is shorter than one window.
CalibSamples sample_calibration_text(const std::string& text, const tokenizer::Tokenizer& tok,
                                     int64_t n_samples, int64_t ctx, uint64_t seed);

// The whole calibration text file. Throws UsageError ("cannot read calibration text ...").
std::string read_calibration_text(const std::string& path);

// FNV-1a 64 of bytes, as 16 hex digits.
std::string fnv1a64_hex(std::string_view bytes);

// Hessians of the inputs of one block's matrices: one per distinct input of the
// architecture's layer matrices (model::LayerMatrix::input: q/k/v share one, gate/up another),
// [n, n] row-major, n = the input's width.
struct BlockHessians {
  struct Entry {
    std::string_view input;  // a model/names.h constant
    int64_t width = 0;
    std::vector<double> h;
  };
  std::vector<Entry> entries;
  int64_t n_tokens = 0;
  // The Hessian of `input`; throws Error when the block has none.
  const std::vector<double>& of(std::string_view input) const;
};

class Calibrator {
 public:
  // Embeds every sample. The model's layers may be rebound between blocks (its LayerWeights
  // are read at each call).
  Calibrator(const model::Model& m, std::vector<std::vector<int32_t>> samples, ThreadPool& pool);

  // Runs block il on every sample's current hidden state (not updating it) and returns the
  // Hessians of its matrices' inputs. progress(done, total) after each sample; stops early
  // (returning false) once cancel is set.
  bool collect(int64_t il, BlockHessians& out, const std::function<void(int64_t, int64_t)>& progress,
               const std::atomic<bool>* cancel);
  // Runs block il (as the model binds it now) on every sample, updating the hidden states.
  bool advance(int64_t il, const std::function<void(int64_t, int64_t)>& progress,
               const std::atomic<bool>* cancel);

  // The sequential block loop that GPTQ and the pruners are clients of: for each block in
  // order, collect its Hessians on the current hidden states, let apply(il, hessians) change
  // the block's weights (rebinding the model's views), then advance the hidden states through
  // the block as it is now (not after the last one). progress(il, phase, done, total) after
  // each sample, phase "hessians" or "forward". Returns false once cancel is set.
  using BlockProgress =
      std::function<void(int64_t il, const char* phase, int64_t done, int64_t total)>;
  bool for_each_block(const std::function<void(int64_t il, const BlockHessians& h)>& apply,
                      const BlockProgress& progress, const std::atomic<bool>* cancel);

  int64_t n_samples() const { return static_cast<int64_t>(samples_.size()); }
  int64_t n_tokens() const { return n_samples() * ctx_; }

 private:
  const model::Model& model_;
  std::vector<std::vector<int32_t>> samples_;
  ThreadPool& pool_;
  int64_t ctx_;
  std::vector<float> hidden_;  // [n_samples, ctx, n_embd]
  kv::KvCache kv_;
  model::ForwardScratch scratch_;
};

}  // namespace squeeze::calib
