// Writing a compressed model safely: the output path is checked before any work, and the
// file appears only complete (written to a temporary, renamed into place).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/format.h"
#include "gguf/gguf.h"

namespace squeeze::compress {

// The work stopped because the cancel flag was set; nothing was left on disk.
class Interrupted : public Error {
 public:
  using Error::Error;
};

inline bool cancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

// Throws UsageError when out_path is the source file, a directory, or in a directory that
// does not exist or is not writable.
void check_output_path(const gguf::File& src, const std::string& out_path);

// Writes w to out_path through an AtomicFile, so a failure or a cancel leaves neither a partial
// file nor a temporary behind, and an existing out_path untouched until the new one is
// complete. Throws Interrupted on cancel, Error on I/O failure.
void write_output(const gguf::Writer& w, const std::string& out_path,
                  const std::atomic<bool>* cancel);

// A copy of src whose metadata keys for which `own` is true are replaced by what `add` writes
// (tensors unchanged), written through write_output.
void write_with_metadata(const gguf::File& src, const std::function<bool(std::string_view)>& own,
                         const std::function<void(gguf::Writer&)>& add,
                         const std::string& out_path, const std::atomic<bool>* cancel);

// The product of every dimension after the first.
int64_t tensor_rows(const gguf::TensorInfo& t);

// rows x cols weights of `type` at data, decoded to floats (rows in parallel).
std::vector<float> decode_rows(formats::DType type, const void* data, int64_t cols, int64_t rows,
                               ThreadPool& pool);

}  // namespace squeeze::compress
