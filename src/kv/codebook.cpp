#include "kv/codebook.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace squeeze::kv {

std::string KvCodebook::prefix(KvType t) { return "squeeze.kv_codebook." + kv_type_name(t) + "."; }

void KvCodebook::write(gguf::Writer& w) const {
  const std::string p = prefix(bits == 4 ? KvType::Q4 : KvType::Q2);
  w.add_int64(p + "n_layer", n_layer);
  w.add_float32_array(p + "levels", levels);
  w.add_string(p + "options", options);
  w.add_string(p + "calib", calib);
}

std::optional<KvCodebook> KvCodebook::read(const gguf::File& f, KvType type) {
  if (type != KvType::Q4 && type != KvType::Q2) return std::nullopt;
  const std::string p = prefix(type);
  const std::optional<int64_t> n_layer = f.get_int(p + "n_layer");
  if (!n_layer) return std::nullopt;
  KvCodebook cb;
  cb.bits = kv_bits(type);
  cb.n_layer = *n_layer;
  cb.levels = f.get_float_array(p + "levels");
  cb.options = std::string(f.get_string(p + "options").value_or(""));
  cb.calib = std::string(f.get_string(p + "calib").value_or(""));
  const int64_t n = cb.n_levels();
  if (cb.n_layer < 1 || cb.n_layer > (int64_t{1} << 20) ||
      static_cast<int64_t>(cb.levels.size()) != cb.n_layer * 2 * n) {
    throw FormatError(p + "levels: " + std::to_string(cb.levels.size()) + " values, not " +
                      std::to_string(cb.n_layer) + " layers x 2 x " + std::to_string(n));
  }
  for (int64_t il = 0; il < cb.n_layer; ++il) {
    for (int kv = 0; kv < 2; ++kv) {
      const float* l = cb.at(il, kv);
      for (int64_t i = 0; i < n; ++i) {
        if (!(l[i] >= 0 && l[i] <= static_cast<float>(n - 1)) || (i > 0 && !(l[i] > l[i - 1]))) {
          throw FormatError(p + "levels of layer " + std::to_string(il) +
                            " must ascend within [0, " + std::to_string(n - 1) + "]");
        }
      }
    }
  }
  return cb;
}

KvCodebook KvCodebook::require(const gguf::File& f, KvType type) {
  std::optional<KvCodebook> cb = read(f, type);
  if (!cb) {
    throw UsageError("--kv-codebook: the model holds no " + kv_type_name(type) +
                     " KV codebook (make a copy with one: squeeze calibrate-kv --kv-type " +
                     kv_type_name(type) + " -f TEXT -o OUT)");
  }
  return *std::move(cb);
}

CodebookFit::CodebookFit(int64_t n_layer, int bits, int64_t bins)
    : n_layer_(n_layer), bits_(bits), bins_(bins) {
  if (bits != 4 && bits != 2) throw UsageError("a KV codebook is for q4 and q2 codes");
  const auto n = static_cast<size_t>(n_layer * 2 * bins);
  w_.assign(n, 0);
  wt_.assign(n, 0);
  wtt_.assign(n, 0);
}

void CodebookFit::add(int64_t il, int kv, float t, float w) {
  const float top = static_cast<float>((1 << bits_) - 1);
  t = std::clamp(t, 0.0f, top);
  const auto bin = std::min<int64_t>(static_cast<int64_t>(t / top * static_cast<float>(bins_)), bins_ - 1);
  const auto i = static_cast<size_t>((il * 2 + kv) * bins_ + bin);
  w_[i] += w;
  wt_[i] += static_cast<double>(w) * t;
  wtt_[i] += static_cast<double>(w) * t * t;
  ++observed_;
}

void CodebookFit::observe(int64_t il, int kv, const float* x, int64_t n_rows, int64_t width,
                          int64_t group, bool by_column) {
  // One group: n values at x[i * stride].
  auto one = [&](const float* g, int64_t n, int64_t stride) {
    float lo = g[0], hi = g[0];
    for (int64_t i = 1; i < n; ++i) {
      lo = std::min(lo, g[i * stride]);
      hi = std::max(hi, g[i * stride]);
    }
    const QuantParams p = fit_group(lo, hi, bits_);
    const float scale = f16_to_f32(p.scale), min = f16_to_f32(p.min);
    if (!(scale > 0)) return;  // a constant group: every level serves it alike
    for (int64_t i = 0; i < n; ++i) add(il, kv, (g[i * stride] - min) / scale, scale * scale);
  };
  if (by_column) {
    for (int64_t c = 0; c < width; ++c) one(x + c, n_rows, width);
  } else {
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t g0 = 0; g0 < width; g0 += group) one(x + r * width + g0, group, 1);
    }
  }
}

KvCodebook CodebookFit::uniform() const {
  KvCodebook cb;
  cb.bits = bits_;
  cb.n_layer = n_layer_;
  for (int64_t i = 0; i < n_layer_ * 2; ++i) {
    for (int c = 0; c < cb.n_levels(); ++c) cb.levels.push_back(static_cast<float>(c));
  }
  return cb;
}

namespace {

// The level nearest t, as the quantizer picks it.
int nearest(const float* levels, int n, double t) {
  return static_cast<int>(nearest_level(levels, static_cast<uint32_t>(n - 1), t));
}

}  // namespace

KvCodebook CodebookFit::fit(int iterations) const {
  KvCodebook cb = uniform();
  const int n = cb.n_levels();
  std::vector<double> sw(static_cast<size_t>(n)), swt(static_cast<size_t>(n));
  for (int64_t h = 0; h < n_layer_ * 2; ++h) {
    float* levels = cb.levels.data() + h * n;
    const double* w = w_.data() + h * bins_;
    const double* wt = wt_.data() + h * bins_;
    for (int it = 0; it < iterations; ++it) {
      std::fill(sw.begin(), sw.end(), 0.0);
      std::fill(swt.begin(), swt.end(), 0.0);
      for (int64_t b = 0; b < bins_; ++b) {
        if (w[b] <= 0) continue;
        const int c = nearest(levels, n, wt[b] / w[b]);
        sw[static_cast<size_t>(c)] += w[b];
        swt[static_cast<size_t>(c)] += wt[b];
      }
      bool moved = false;
      for (int c = 0; c < n; ++c) {
        if (sw[static_cast<size_t>(c)] <= 0) continue;  // an empty cell keeps its level
        const auto l = static_cast<float>(swt[static_cast<size_t>(c)] / sw[static_cast<size_t>(c)]);
        moved = moved || l != levels[c];
        levels[c] = l;
      }
      // Empty cells can leave two levels out of order: put them back in order, apart.
      std::sort(levels, levels + n);
      for (int c = 1; c < n; ++c) levels[c] = std::max(levels[c], std::nextafter(levels[c - 1], 1e9f));
      if (!moved) break;
    }
    // Lloyd's levels are the means of their cells, so the values they stand for spread less
    // than the values did (by the squared error): attention's scores flatten. Stretch the levels
    // about the mean until their spread matches the values' (costs little squared error).
    double sum_w = 0, sum_wt = 0, sum_wtt = 0, spread = 0;
    for (int64_t b = 0; b < bins_; ++b) {
      sum_w += w[b];
      sum_wt += wt[b];
      sum_wtt += wtt_[static_cast<size_t>(h * bins_ + b)];
    }
    if (sum_w <= 0) continue;
    const double mean = sum_wt / sum_w;
    for (int64_t b = 0; b < bins_; ++b) {
      if (w[b] > 0) spread += w[b] * std::pow(levels[nearest(levels, n, wt[b] / w[b])] - mean, 2);
    }
    double k = spread > 0 ? std::sqrt((sum_wtt / sum_w - mean * mean) / (spread / sum_w)) : 1.0;
    // No further than the ends of the code range.
    if (levels[n - 1] > mean) k = std::min(k, (n - 1 - mean) / (levels[n - 1] - mean));
    if (levels[0] < mean) k = std::min(k, mean / (mean - levels[0]));
    for (int c = 0; c < n; ++c) levels[c] = static_cast<float>(mean + (levels[c] - mean) * k);
    // A degenerate histogram (levels pushed together past the top): the uniform grid instead.
    if (!(levels[0] >= 0 && levels[n - 1] <= static_cast<float>(n - 1))) {
      for (int c = 0; c < n; ++c) levels[c] = static_cast<float>(c);
    }
  }
  return cb;
}

double CodebookFit::error(const KvCodebook& cb) const {
  double e = 0, total = 0;
  const int n = cb.n_levels();
  for (int64_t h = 0; h < n_layer_ * 2; ++h) {
    const float* levels = cb.levels.data() + h * n;
    for (int64_t b = 0; b < bins_; ++b) {
      const auto i = static_cast<size_t>(h * bins_ + b);
      if (w_[i] <= 0) continue;
      const double l = levels[nearest(levels, n, wt_[i] / w_[i])];
      e += wtt_[i] - 2 * l * wt_[i] + l * l * w_[i];
      total += w_[i];
    }
  }
  return total > 0 ? e / total : 0;
}

}  // namespace squeeze::kv
