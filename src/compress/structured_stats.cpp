#include "compress/structured_stats.h"

#include <algorithm>
#include <cmath>

#include "compress/output.h"
#include "core/error.h"
#include "model/context.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::compress {

calib::CalibSamples read_calibration_samples(const model::Model& m, const StructuredPruneOptions& o) {
  const std::string text = calib::read_calibration_text(o.calib_path);
  if (o.calib_ctx > m.hparams().n_ctx_train) {
    throw UsageError("--calib-ctx " + std::to_string(o.calib_ctx) + " exceeds the model's " +
                     std::to_string(m.hparams().n_ctx_train) + " tokens");
  }
  tokenizer::Tokenizer tok(tokenizer::read_vocab(m.file()));
  calib::CalibSamples s = calib::sample_calibration_text(text, tok, o.calib_samples, o.calib_ctx, o.seed);
  if (o.log) {
    o.log("calibration: " + std::to_string(o.calib_samples) + " samples x " +
              std::to_string(o.calib_ctx) + " tokens from " + o.calib_path, false);
  }
  return s;
}

void channel_statistics(const model::Model& m, const StructuredPruneOptions& o, std::string_view row_input,
                        std::string_view unit_input, Calibration& c, ThreadPool& pool) {
  const auto n_layer = static_cast<size_t>(m.hparams().n_layer);
  // Per input (row, unit) and layer: Σx and Σx² of every channel.
  std::vector<std::vector<double>> sum[2], sq[2];
  for (int k = 0; k < 2; ++k) {
    sum[k].resize(n_layer);
    sq[k].resize(n_layer);
  }
  model::Context ctx(m, o.calib_ctx, pool, o.calib_ctx);
  ctx.set_callback([&](std::string_view name, int layer, const float* data, int64_t rows, int64_t width) {
    const int k = name == row_input ? 0 : name == unit_input ? 1 : -1;
    if (k < 0 || layer < 0) return;
    std::vector<double>& s1 = sum[k][static_cast<size_t>(layer)];
    std::vector<double>& s2 = sq[k][static_cast<size_t>(layer)];
    s1.resize(static_cast<size_t>(width), 0.0);
    s2.resize(static_cast<size_t>(width), 0.0);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t j = 0; j < width; ++j) {
        const double x = data[t * width + j];
        s1[j] += x;
        s2[j] += x * x;
      }
    }
  });
  const auto n = static_cast<int64_t>(c.samples.samples.size());
  for (int64_t i = 0; i < n; ++i) {
    if (cancelled(o.cancel)) throw Interrupted("interrupted; no output written");
    ctx.reset();
    ctx.decode_from(c.samples.samples[i], o.calib_ctx);
    if (o.log) o.log("activation statistics " + std::to_string(i + 1) + "/" + std::to_string(n) + " samples", true);
  }
  const double tokens = static_cast<double>(n * o.calib_ctx);
  const auto norms = [](const std::vector<double>& s2) {
    std::vector<float> d(s2.size());
    for (size_t j = 0; j < s2.size(); ++j) d[j] = static_cast<float>(std::sqrt(s2[j]));
    return d;
  };
  c.row_norm.assign(n_layer, {});
  c.unit_norm.assign(n_layer, {});
  c.mean.assign(n_layer, {});
  c.var.assign(n_layer, {});
  for (size_t il = 0; il < n_layer; ++il) {
    if (sq[0][il].empty() || sq[1][il].empty()) {
      throw Error("layer " + std::to_string(il) + " gave no " + std::string(row_input) + " / " +
                  std::string(unit_input) + " statistics");
    }
    c.row_norm[il] = norms(sq[0][il]);
    c.unit_norm[il] = norms(sq[1][il]);
    for (size_t j = 0; j < sum[1][il].size(); ++j) {
      const double mu = sum[1][il][j] / tokens;
      c.mean[il].push_back(mu);
      c.var[il].push_back(std::max(0.0, sq[1][il][j] / tokens - mu * mu));
    }
  }
}

}  // namespace squeeze::compress
