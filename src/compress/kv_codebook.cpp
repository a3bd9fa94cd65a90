#include "compress/kv_codebook.h"

#include "compress/output.h"
#include "core/error.h"
#include "model/context.h"

namespace squeeze::compress {

KvCodebookFit fit_kv_codebook(const model::Model& m, const std::vector<std::vector<int32_t>>& samples,
                              kv::KvOptions o, ThreadPool& pool,
                              const std::function<void(int64_t, int64_t)>& progress,
                              const std::atomic<bool>* cancel) {
  if (o.type != kv::KvType::Q4 && o.type != kv::KvType::Q2) {
    throw UsageError("a KV codebook is fitted for q4 or q2 codes (--kv-type)");
  }
  if (samples.empty()) throw UsageError("a KV codebook needs at least one calibration sample");
  o.recent = 0;
  o.codebook = false;
  kv::CodebookFit fit(m.hparams().n_layer, kv::kv_bits(o.type));
  const auto n = static_cast<int64_t>(samples.size());
  for (int64_t i = 0; i < n; ++i) {
    if (cancelled(cancel)) throw Interrupted("interrupted: no KV codebook written");
    const std::vector<int32_t>& s = samples[static_cast<size_t>(i)];
    const auto len = static_cast<int64_t>(s.size());
    model::Context ctx(m, len, pool, std::min<int64_t>(len, 256), 1, 0, o);
    ctx.kv_mut().set_codebook_fit(&fit);
    ctx.decode_from(s, len);  // no logits: the cache's blocks are what is wanted
    if (progress) progress(i + 1, n);
  }
  KvCodebookFit r;
  r.codebook = fit.fit();
  r.codebook.options = kv::describe(o);
  r.uniform_error = fit.error(fit.uniform());
  r.fitted_error = fit.error(r.codebook);
  r.observed = fit.observed();
  return r;
}

void write_kv_codebook(const gguf::File& src, const kv::KvCodebook& cb, const std::string& out_path,
                       const std::atomic<bool>* cancel) {
  const std::string prefix = kv::KvCodebook::prefix(cb.bits == 4 ? kv::KvType::Q4 : kv::KvType::Q2);
  write_with_metadata(
      src, [&](std::string_view key) { return key.starts_with(prefix); },
      [&](gguf::Writer& w) { cb.write(w); }, out_path, cancel);
}

}  // namespace squeeze::compress
