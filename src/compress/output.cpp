#include "compress/output.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace squeeze::compress {

namespace fs = std::filesystem;

void check_output_path(const gguf::File& src, const std::string& out_path) {
  if (out_path.empty()) throw UsageError("no output file given");
  std::error_code ec;
  const fs::path out(out_path);
  if (fs::exists(out, ec)) {
    if (fs::equivalent(out, fs::path(src.path()), ec)) {
      throw UsageError("the output '" + out_path + "' is the input file; write to another path");
    }
    if (fs::is_directory(out, ec)) throw UsageError("the output '" + out_path + "' is a directory");
  }
  const fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (!fs::is_directory(dir, ec)) {
    throw UsageError("cannot write '" + out_path + "': directory '" + dir.string() +
                     "' does not exist");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw UsageError("cannot write '" + out_path + "': directory '" + dir.string() + "': " +
                     std::strerror(errno));
  }
}

void write_output(const gguf::Writer& w, const std::string& out_path,
                  const std::atomic<bool>* cancel) {
  const Interrupted interrupted("interrupted; no output written");
  if (cancelled(cancel)) throw interrupted;
  // The file becomes out_path only if no cancel arrived while it was being written (a write
  // cannot be stopped half-way); otherwise the temporary file goes with `f`.
  AtomicFile f(out_path);
  w.write_to(f);
  if (cancelled(cancel)) throw interrupted;
  f.commit();
}

int64_t tensor_rows(const gguf::TensorInfo& t) {
  int64_t rows = 1;
  for (size_t d = 1; d < t.shape.size(); ++d) rows *= t.shape[d];
  return rows;
}

void write_with_metadata(const gguf::File& src, const std::function<bool(std::string_view)>& own,
                         const std::function<void(gguf::Writer&)>& add,
                         const std::string& out_path, const std::atomic<bool>* cancel) {
  gguf::Writer w(src.alignment());
  std::vector<std::string_view> skip;
  for (const auto& kv : src.metadata()) {
    if (own(kv.key)) skip.push_back(kv.key);
  }
  w.copy_metadata(src, skip);
  add(w);
  for (const gguf::TensorInfo& t : src.tensors()) {
    if (cancelled(cancel)) throw Interrupted("interrupted; no output written");
    w.add_tensor(t.name, t.type, t.shape, {static_cast<const uint8_t*>(t.data), t.n_bytes});
  }
  write_output(w, out_path, cancel);
}

std::vector<float> decode_rows(formats::DType type, const void* data, int64_t cols, int64_t rows,
                               ThreadPool& pool) {
  std::vector<float> w(static_cast<size_t>(cols * rows));
  const auto& k = formats::kernels(type);
  const size_t rb = formats::row_bytes(type, cols);
  const auto* in = static_cast<const uint8_t*>(data);
  pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) k.dequantize_row(in + r * rb, w.data() + r * cols, cols);
  });
  return w;
}

}  // namespace squeeze::compress
