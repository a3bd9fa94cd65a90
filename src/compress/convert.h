// Round-to-nearest conversion of a whole GGUF model between llama.cpp's block types, as
// llama-quantize does it for a plain type: every weight matrix is decoded to float and
// re-encoded with ggml's reference quantizer of the target type (tensor_plan.h says which
// tensors and into what); everything else is copied. Metadata is kept; general.file_type,
// general.quantization_version and squeeze.quantization.{method,source_type} are set.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "compress/output.h"
#include "compress/tensor_plan.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"

namespace squeeze::compress {

// Decodes n_rows rows of `from` (n_per_row elements each, packed) and re-encodes them as `to`
// with its reference quantizer (Kernels::quantize_row_ref). n_per_row must be a multiple of
// both block sizes. Rows are split over the pool. When `cancel` becomes true, the remaining
// rows are skipped (dst is then incomplete) and the function returns false; true otherwise.
bool convert_rows(formats::DType from, formats::DType to, const void* src, void* dst,
                  int64_t n_per_row, int64_t n_rows, ThreadPool& pool,
                  const std::atomic<bool>* cancel = nullptr);

struct ConvertOptions {
  formats::DType target = formats::DType::Q8_0;
  // Checked between tensors and every few rows; once true, the conversion stops, removes
  // whatever it wrote and throws Interrupted.
  const std::atomic<bool>* cancel = nullptr;
  // Called before each tensor: index (0-based), count, and what happens to it.
  std::function<void(size_t i, size_t n, const TensorPlan& p)> on_tensor;
};

struct ConvertStats {
  size_t n_tensors = 0;
  size_t n_converted = 0;  // re-encoded (the rest copied)
  size_t n_fallback = 0;   // written as F16 for an unusual row length
  uint64_t bytes_in = 0;   // tensor data of the source
  uint64_t bytes_out = 0;  // tensor data written
};

// Converts `src` and writes `out_path` through a temporary file renamed into place at the end,
// so a failed or interrupted run leaves neither a partial file nor the temporary behind (and an
// existing out_path untouched). Throws UsageError when out_path is the source file or its
// directory is not writable (checked before any work), FormatError for tensors squeeze cannot
// decode, Error on I/O failure, Interrupted on cancel. The whole output is held in memory
// until it is written (gguf::Writer).
ConvertStats convert_model(const gguf::File& src, const std::string& out_path,
                           const ConvertOptions& opts, ThreadPool& pool);

}  // namespace squeeze::compress
