#include "compress/convert.h"

#include <span>
#include <vector>

#include "compress/output.h"

namespace squeeze::compress {

namespace {

using formats::DType;

constexpr uint32_t kGgmlQuantizationVersion = 2;  // GGML_QNT_VERSION, as llama-quantize writes it
// Rows converted between two looks at the cancel flag.
constexpr int64_t kCancelCheckRows = 16;

}  // namespace

bool convert_rows(DType from, DType to, const void* src, void* dst, int64_t n_per_row,
                  int64_t rows, ThreadPool& pool, const std::atomic<bool>* cancel) {
  const formats::Kernels& dec = formats::kernels(from);
  const formats::Kernels& enc = formats::kernels(to);
  if (dec.dequantize_row == nullptr || enc.quantize_row_ref == nullptr) {
    throw FormatError("cannot convert " + std::string(formats::format_info(from).name) + " to " +
                      std::string(formats::format_info(to).name));
  }
  const size_t src_row = formats::row_bytes(from, n_per_row);
  const size_t dst_row = formats::row_bytes(to, n_per_row);
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  std::vector<std::vector<float>> scratch(pool.size(), std::vector<float>(n_per_row));  // [n_threads][n_per_row]
  std::atomic<bool> stopped{false};
  pool.parallel_for(rows, 1, [&](int64_t begin, int64_t end, int ith) {
    float* x = scratch[ith].data();
    for (int64_t r = begin; r < end; ++r) {
      if ((r - begin) % kCancelCheckRows == 0 && cancelled(cancel)) {
        stopped.store(true, std::memory_order_relaxed);
        return;
      }
      dec.dequantize_row(in + r * src_row, x, n_per_row);
      enc.quantize_row_ref(x, out + r * dst_row, n_per_row);
    }
  });
  return !stopped.load() && !cancelled(cancel);
}

ConvertStats convert_model(const gguf::File& src, const std::string& out_path,
                           const ConvertOptions& opts, ThreadPool& pool) {
  const TargetType& target = target_type(opts.target);
  check_output_path(src, out_path);
  const std::vector<TensorPlan> plan = plan_conversion(src, opts.target);
  const Interrupted interrupted("interrupted; no output written");

  gguf::Writer w(src.alignment());
  constexpr std::string_view kSplitKeys[] = {"split.no", "split.count", "split.tensors.count"};
  w.copy_metadata(src, kSplitKeys);
  w.add_uint32("general.quantization_version", kGgmlQuantizationVersion);
  w.add_uint32("general.file_type", target.llama_ftype);
  w.add_string("squeeze.quantization.method", "rtn");
  w.add_string("squeeze.quantization.source_type", dominant_weight_type(src));

  ConvertStats st;
  st.n_tensors = plan.size();
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (cancelled(opts.cancel)) throw interrupted;
    const TensorPlan& p = plan[i];
    const gguf::TensorInfo& t = *p.src;
    if (opts.on_tensor) opts.on_tensor(i, plan.size(), p);
    st.bytes_in += t.n_bytes;
    if (p.action == TensorAction::Copy) {
      w.add_tensor(t.name, t.type, t.shape, {static_cast<const uint8_t*>(t.data), t.n_bytes});
      st.bytes_out += t.n_bytes;
      continue;
    }
    const int64_t rows = tensor_rows(t);
    buf.resize(formats::row_bytes(p.type, t.shape[0]) * static_cast<size_t>(rows));
    if (!convert_rows(t.type, p.type, t.data, buf.data(), t.shape[0], rows, pool, opts.cancel)) {
      throw interrupted;
    }
    w.add_tensor(t.name, p.type, t.shape, buf);
    st.bytes_out += buf.size();
    ++st.n_converted;
    st.n_fallback += p.fallback ? 1 : 0;
  }
  if (cancelled(opts.cancel)) throw interrupted;

  write_output(w, out_path, opts.cancel);
  return st;
}

}  // namespace squeeze::compress
