// A calibrated non-uniform codebook for quantized KV codes (KVQuant's nuq): per layer, for keys
// and for values, the 2^bits levels a code stands for (x ~= min + levels[code] * scale, in the
// code units of kv_quant.h's uniform grid, where levels[code] = code), fitted by weighted
// k-means (Lloyd) to what the cache's groups hold on calibration text, and stored in the model
// file (squeeze calibrate-kv) for `--kv-codebook`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "kv/kv_quant.h"

namespace squeeze::kv {

struct KvCodebook {
  int bits = 0;
  int64_t n_layer = 0;
  std::vector<float> levels;  // [n_layer, 2 (K, V), 2^bits], ascending, in [0, 2^bits - 1]
  std::string options;        // describe() of the cache it was fitted under
  std::string calib;          // what it was fitted on ("wiki.valid.raw, 8 x 512 tokens")

  int n_levels() const { return 1 << bits; }
  const float* at(int64_t il, int kv) const { return levels.data() + (il * 2 + kv) * n_levels(); }
  // Its keys in a model file: squeeze.kv_codebook.<q4|q2>.*
  static std::string prefix(KvType t);
  void write(gguf::Writer& w) const;
  // The codebook for `type` the file holds; nullopt when none. FormatError for one of the wrong
  // size or with levels out of order or out of range.
  static std::optional<KvCodebook> read(const gguf::File& f, KvType type);
  // read's codebook; UsageError naming the command that makes one when the file has none.
  static KvCodebook require(const gguf::File& f, KvType type);
};

// Gathers what a cache's groups hold while it freezes blocks (KvCache::set_codebook_fit):
// each value at its place t = (x - min) / scale in code units, weighted by scale^2 (a level
// off by d in t is off by d * scale in x), in a histogram per layer and K / V.
class CodebookFit {
 public:
  CodebookFit(int64_t n_layer, int bits, int64_t bins = 4096);
  // Rows x[n_rows, width] of layer il, K (0) or V (1), grouped as the quantizer groups them
  // (by column over all rows, or `group` columns of a row).
  void observe(int64_t il, int kv, const float* x, int64_t n_rows, int64_t width, int64_t group,
               bool by_column);
  // Levels minimising the weighted squared error of the histograms (Lloyd's algorithm from the
  // uniform grid, `iterations` rounds); a layer with nothing observed keeps the uniform grid.
  KvCodebook fit(int iterations = 100) const;
  // The uniform grid (levels[code] = code), in the same shape.
  KvCodebook uniform() const;
  // The weighted squared error (code units) of the observed values placed at their nearest level
  // of cb, per observed weight (fit's result against uniform's: what the levels gain).
  double error(const KvCodebook& cb) const;
  // Values observed so far.
  int64_t observed() const { return observed_; }

 private:
  void add(int64_t il, int kv, float t, float w);
  int64_t n_layer_;
  int bits_;
  int64_t bins_;
  std::vector<double> w_, wt_, wtt_;  // [n_layer, 2, bins]: sums of w, w * t and w * t^2
  int64_t observed_ = 0;
};

}  // namespace squeeze::kv
