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

// Wanda-sp's channel norms: the square roots of the diagonals of the dense model's calibration
// Hessians of the units' rows' input and of their own activations.
Calibration channel_norms(const model::Model& m, const StructuredPruneOptions& o,
                          std::string_view row_input, std::string_view unit_input, ThreadPool& pool) {
  const int64_t n_layer = m.hparams().n_layer;
  Calibration c;
  c.samples = read_calibration_samples(m, o);
  c.row_norm.resize(static_cast<size_t>(n_layer));
  c.unit_norm.resize(static_cast<size_t>(n_layer));
  calib::Calibrator cal(m, c.samples.samples, pool);
  const auto diag_sqrt = [](const calib::BlockHessians& hs, std::string_view input) {
    for (const calib::BlockHessians::Entry& e : hs.entries) {
      if (e.input != input) continue;
      std::vector<float> d(static_cast<size_t>(e.width));
      for (int64_t j = 0; j < e.width; ++j) {
        d[j] = static_cast<float>(std::sqrt(std::max(0.0, e.h[j * e.width + j])));
      }
      return d;
    }
    throw Error("no calibration statistics of " + std::string(input));
  };
  const auto apply = [&](int64_t il, const calib::BlockHessians& hs) {
    c.row_norm[il] = diag_sqrt(hs, row_input);
    c.unit_norm[il] = diag_sqrt(hs, unit_input);
  };
  const auto progress = [&](int64_t il, const char* phase, int64_t done, int64_t total) {
    if (o.log) {
      o.log("block " + std::to_string(il + 1) + "/" + std::to_string(n_layer) + ": " + phase + " " +
                std::to_string(done) + "/" + std::to_string(total) + " samples", true);
    }
  };
  if (!cal.for_each_block(apply, progress, o.cancel)) throw Interrupted("interrupted; no output written");
  return c;
}

// FLAP's statistics: the mean and variance of every channel of `input` in every layer, over
// every token of the samples run through the dense model.
void activation_moments(const model::Model& m, const StructuredPruneOptions& o, std::string_view input,
                        Calibration& c, ThreadPool& pool) {
  const int64_t n_layer = m.hparams().n_layer;
  std::vector<std::vector<double>> sum(static_cast<size_t>(n_layer)), sq(static_cast<size_t>(n_layer));
  model::Context ctx(m, o.calib_ctx, pool, o.calib_ctx);
  ctx.set_callback([&](std::string_view name, int layer, const float* data, int64_t rows, int64_t width) {
    if (name != input) return;
    std::vector<double>& s1 = sum[static_cast<size_t>(layer)];
    std::vector<double>& s2 = sq[static_cast<size_t>(layer)];
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
  const int64_t n = static_cast<int64_t>(c.samples.samples.size());
  for (int64_t i = 0; i < n; ++i) {
    if (cancelled(o.cancel)) throw Interrupted("interrupted; no output written");
    ctx.reset();
    ctx.decode_from(c.samples.samples[i], o.calib_ctx);
    if (o.log) o.log("activation statistics " + std::to_string(i + 1) + "/" + std::to_string(n) + " samples", true);
  }
  const double tokens = static_cast<double>(n * o.calib_ctx);
  c.mean.resize(static_cast<size_t>(n_layer));
  c.var.resize(static_cast<size_t>(n_layer));
  for (int64_t il = 0; il < n_layer; ++il) {
    for (size_t j = 0; j < sum[il].size(); ++j) {
      const double mu = sum[il][j] / tokens;
      c.mean[il].push_back(mu);
      c.var[il].push_back(std::max(0.0, sq[il][j] / tokens - mu * mu));
    }
  }
}

}  // namespace squeeze::compress
