// Calibrating a non-uniform codebook for the quantized KV cache (KVQuant's nuq; kv/codebook.h):
// the model runs calibration samples with the cache quantizing every block as it fills (no
// recent window), the cache's groups observed as they freeze, and the levels fitted per layer
// for keys and values by weighted k-means; stored in a copy of the model for --kv-codebook.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kv/codebook.h"
#include "model/model.h"

namespace squeeze::compress {

struct KvCodebookFit {
  kv::KvCodebook codebook;
  double uniform_error = 0;  // weighted squared error per value, code units: the uniform grid
  double fitted_error = 0;   // the same with the fitted levels
  int64_t observed = 0;      // values observed
};

// Fits the codebook of a cache with options `o` (q4 or q2; its recent window is set to 0 so
// every block past the sinks freezes) on `samples` (each one sequence). progress(done, total)
// after each sample; Interrupted when cancel is set. UsageError for f16 or q8 options.
KvCodebookFit fit_kv_codebook(const model::Model& m, const std::vector<std::vector<int32_t>>& samples,
                              kv::KvOptions o, ThreadPool& pool,
                              const std::function<void(int64_t, int64_t)>& progress,
                              const std::atomic<bool>* cancel);

// A copy of src with cb stored (replacing a codebook of the same bits; one of the other bits
// stays), written through write_output.
void write_kv_codebook(const gguf::File& src, const kv::KvCodebook& cb, const std::string& out_path,
                       const std::atomic<bool>* cancel);

}  // namespace squeeze::compress
