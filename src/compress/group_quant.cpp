#include "compress/group_quant.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "formats/blocks.h"
#include "formats/sq.h"

namespace squeeze::compress {

namespace {

using formats::DType;

constexpr float kInf = std::numeric_limits<float>::infinity();
// The MSE search: shrink factors 1.00, 0.99, ... down to kMseMinShrink (GPTQ's grid).
constexpr int kMseSteps = 80;
constexpr float kMseMinShrink = 0.2f;
// The KL search: histogram bins of |w| over the tensor.
constexpr int kKlBins = 2048;

float fp16_round(float x) { return f16_to_f32(f32_to_f16(x)); }

// Params for the extremes lo <= hi of a group (already clipped or shrunk).
GroupParams params_for(float lo, float hi, float signed_max, const Grid& g) {
  GroupParams p;
  if (g.q8) {
    p.d = fp16_round(std::max(std::fabs(lo), std::fabs(hi)) / 127.0f);
    p.m = -128.0f * p.d;
  } else if (g.sym) {
    // ggml's Q4_0 convention: the value of largest magnitude maps to the grid's end code 0
    // (d may be negative), so the whole grid [-zero, zero - 1] is used.
    p.d = fp16_round(signed_max / -static_cast<float>(g.zero));
    p.m = -static_cast<float>(g.zero) * p.d;
  } else {
    p.d = fp16_round((hi - lo) / static_cast<float>(g.cmax));
    p.m = fp16_round(lo);
  }
  if (!std::isfinite(p.d) || !std::isfinite(p.m)) throw Error("weights out of fp16 range");
  return p;
}

double group_error(const float* w, int64_t n, const GroupParams& p, const Grid& g) {
  double e = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double diff = w[i] - dequant_code(quantize_code(w[i], p, g), p);
    e += diff * diff;
  }
  return e;
}

// TensorRT's entropy calibration on a histogram of |w|: the threshold (bin edge) whose
// clipped-and-requantized histogram has the least KL divergence from the clipped original.
float kl_threshold(const float* w, int64_t n, int levels) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(w[i]));
  if (amax == 0.0f) return kInf;
  std::vector<double> hist(kKlBins, 0.0);
  const float width = amax / kKlBins;
  for (int64_t i = 0; i < n; ++i) {
    const int b = std::min(kKlBins - 1, static_cast<int>(std::fabs(w[i]) / width));
    hist[b] += 1.0;
  }
  double best_kl = std::numeric_limits<double>::infinity();
  int best_i = kKlBins;
  std::vector<double> p, q;
  for (int i = levels; i <= kKlBins; ++i) {
    p.assign(hist.begin(), hist.begin() + i);
    for (int j = i; j < kKlBins; ++j) p[i - 1] += hist[j];
    // Merge the i bins into `levels` groups, then spread each group's count evenly over the
    // bins that were non-empty in it.
    q.assign(i, 0.0);
    for (int l = 0; l < levels; ++l) {
      const int b0 = static_cast<int>(static_cast<int64_t>(l) * i / levels);
      const int b1 = static_cast<int>(static_cast<int64_t>(l + 1) * i / levels);
      double sum = 0.0;
      int nonzero = 0;
      for (int b = b0; b < b1; ++b) {
        sum += hist[b];
        nonzero += hist[b] > 0.0 ? 1 : 0;
      }
      for (int b = b0; b < b1; ++b) q[b] = hist[b] > 0.0 ? sum / nonzero : 0.0;
    }
    double ps = 0.0, qs = 0.0;
    for (int b = 0; b < i; ++b) {
      ps += p[b];
      qs += q[b];
    }
    double kl = 0.0;
    for (int b = 0; b < i; ++b) {
      if (p[b] == 0.0) continue;
      // A bin with mass in p but none in q (only possible for the last, which carries the
      // clipped tail): smoothed as TensorRT does.
      const double qb = q[b] > 0.0 ? q[b] / qs : 1e-4 / qs;
      kl += (p[b] / ps) * std::log((p[b] / ps) / qb);
    }
    if (kl < best_kl) {
      best_kl = kl;
      best_i = i;
    }
  }
  return best_i >= kKlBins ? kInf : (static_cast<float>(best_i) + 0.5f) * width;
}

}  // namespace

ScaleMethod parse_scale_method(std::string_view name) {
  std::string s(name);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "absmax") return ScaleMethod::Absmax;
  if (s == "percentile") return ScaleMethod::Percentile;
  if (s == "mse") return ScaleMethod::Mse;
  if (s == "kl") return ScaleMethod::Kl;
  throw UsageError("unknown scale method '" + std::string(name) +
                   "' (choose absmax, percentile, mse or kl)");
}

std::string_view scale_method_name(ScaleMethod m) {
  switch (m) {
    case ScaleMethod::Absmax: return "absmax";
    case ScaleMethod::Percentile: return "percentile";
    case ScaleMethod::Mse: return "mse";
    case ScaleMethod::Kl: return "kl";
  }
  return "?";
}

void check_scheme(const QuantScheme& s) {
  if (s.bits != 2 && s.bits != 3 && s.bits != 4 && s.bits != 8) {
    throw UsageError("--bits must be 2, 3, 4 or 8 (got " + std::to_string(s.bits) + ")");
  }
  if (s.group != 32 && s.group != 64 && s.group != 128 && s.group != -1) {
    throw UsageError("--group-size must be 32, 64, 128 or -1 (got " + std::to_string(s.group) +
                     ")");
  }
  if (s.bits == 8 && (!s.sym || s.group != 32)) {
    throw UsageError("8-bit weights are stored as q8_0: symmetric (--sym) with group size 32");
  }
  if (!(s.percentile > 0.0f && s.percentile <= 100.0f)) {
    throw UsageError("--percentile must be in (0, 100]");
  }
}

std::string scheme_text(const QuantScheme& s) {
  std::string t = std::to_string(s.bits);
  t += "-bit ";
  if (s.group < 0) {
    t += "per-row";
  } else {
    t += "g";
    t += std::to_string(s.group);
  }
  t += s.sym ? " sym " : " asym ";
  t += scale_method_name(s.scale);
  return t;
}

Storage storage_for(const QuantScheme& s, int64_t n_cols) {
  check_scheme(s);
  if (n_cols % 32 != 0) {
    throw UsageError("rows of " + std::to_string(n_cols) +
                     " elements cannot be split into groups of 32");
  }
  Storage st;
  if (s.bits == 8) {
    st.type = DType::Q8_0;
    return st;
  }
  if (s.bits == 4 && s.group == 32) {
    st.type = s.sym ? DType::Q4_0 : DType::Q4_1;
    return st;
  }
  // squeeze's own types: the scheme's group, or the largest smaller one dividing the row;
  // a per-row scheme stores its one pair in every group of the largest that fits.
  const int64_t want = s.group < 0 ? 128 : s.group;
  int64_t g = want;
  while (n_cols % g != 0) g /= 2;
  st.group = g;
  st.per_row = s.group < 0;
  st.fallback = !st.per_row && g != want;
  st.type = formats::sq_type(s.bits, g);
  return st;
}

Grid grid_for(const QuantScheme& s, DType store) {
  Grid g;
  if (store == DType::Q8_0) {
    g.cmin = 1;
    g.cmax = 255;
    g.sym = true;
    g.zero = 128;
    g.q8 = true;
    return g;
  }
  const int bits = store == DType::Q4_0 || store == DType::Q4_1 ? 4 : formats::sq_bits(store);
  g.cmax = (1 << bits) - 1;
  g.sym = s.sym;
  g.zero = g.sym ? 1 << (bits - 1) : 0;
  return g;
}

GroupParams choose_params(const float* w, int64_t n, const Grid& g, ScaleMethod method,
                          float clip) {
  float lo = kInf, hi = -kInf, signed_max = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::clamp(w[i], -clip, clip);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    if (std::fabs(v) > std::fabs(signed_max)) signed_max = v;
  }
  if (method != ScaleMethod::Mse) return params_for(lo, hi, signed_max, g);
  GroupParams best = params_for(lo, hi, signed_max, g);
  double best_err = group_error(w, n, best, g);
  for (int step = 1; step < kMseSteps; ++step) {
    const float p = 1.0f - (1.0f - kMseMinShrink) * static_cast<float>(step) / kMseSteps;
    const GroupParams cand = params_for(p * lo, p * hi, p * signed_max, g);
    const double err = group_error(w, n, cand, g);
    if (err < best_err) {
      best_err = err;
      best = cand;
    }
  }
  return best;
}

float tensor_clip(const float* w, int64_t n, const QuantScheme& s) {
  if (n <= 0) return kInf;
  if (s.scale == ScaleMethod::Percentile) {
    std::vector<float> a(w, w + n);
    for (float& v : a) v = std::fabs(v);
    const auto k = std::min<int64_t>(
        n - 1, static_cast<int64_t>(std::ceil(static_cast<double>(s.percentile) / 100.0 * n)) - 1);
    std::nth_element(a.begin(), a.begin() + std::max<int64_t>(k, 0), a.end());
    const float t = a[std::max<int64_t>(k, 0)];
    return t > 0.0f ? t : kInf;
  }
  if (s.scale == ScaleMethod::Kl) return kl_threshold(w, n, 1 << (s.bits - 1));
  return kInf;
}

void encode_row(DType store, int64_t group, const uint8_t* codes, const GroupParams* params,
                int64_t n_cols, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  if (store == DType::Q4_0 || store == DType::Q4_1 || store == DType::Q8_0) {
    for (int64_t b = 0; b < n_cols / 32; ++b) {
      const uint8_t* c = codes + b * 32;
      const GroupParams& p = params[b];
      if (store == DType::Q8_0) {
        formats::BlockQ8_0 blk{};
        blk.d = f32_to_f16(p.d);
        for (int j = 0; j < 32; ++j) blk.qs[j] = static_cast<int8_t>(c[j] - 128);
        std::memcpy(out + b * sizeof blk, &blk, sizeof blk);
      } else if (store == DType::Q4_0) {
        formats::BlockQ4_0 blk{};
        blk.d = f32_to_f16(p.d);
        for (int j = 0; j < 16; ++j) blk.qs[j] = static_cast<uint8_t>(c[j] | (c[j + 16] << 4));
        std::memcpy(out + b * sizeof blk, &blk, sizeof blk);
      } else {
        formats::BlockQ4_1 blk{};
        blk.d = f32_to_f16(p.d);
        blk.m = f32_to_f16(p.m);
        for (int j = 0; j < 16; ++j) blk.qs[j] = static_cast<uint8_t>(c[j] | (c[j + 16] << 4));
        std::memcpy(out + b * sizeof blk, &blk, sizeof blk);
      }
    }
    return;
  }
  const size_t block_bytes = formats::format_info(store).block_bytes;
  for (int64_t b = 0; b < n_cols / group; ++b) {
    formats::sq_pack_block(store, params[b].d, params[b].m, codes + b * group,
                           out + b * block_bytes);
  }
}

void quantize_rtn(const float* w, int64_t rows, int64_t cols, const QuantScheme& s,
                  const Storage& st, void* dst, ThreadPool& pool) {
  const size_t row_bytes = formats::row_bytes(st.type, cols);
  auto* out = static_cast<uint8_t*>(dst);
  const bool ggml_type = !formats::is_sq(st.type);
  if (s.scale == ScaleMethod::Absmax && ggml_type) {
    const auto& k = formats::kernels(st.type);
    pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) k.quantize_row_ref(w + r * cols, out + r * row_bytes, cols);
    });
    return;
  }
  const Grid g = grid_for(s, st.type);
  const float clip = tensor_clip(w, rows * cols, s);
  const int64_t n_groups = cols / st.group;
  pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1, int) {
    std::vector<uint8_t> codes(cols);
    std::vector<GroupParams> params(n_groups);
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = w + r * cols;
      if (st.per_row) {
        std::fill(params.begin(), params.end(), choose_params(x, cols, g, s.scale, clip));
      } else {
        for (int64_t b = 0; b < n_groups; ++b) {
          params[b] = choose_params(x + b * st.group, st.group, g, s.scale, clip);
        }
      }
      for (int64_t i = 0; i < cols; ++i) {
        codes[i] = static_cast<uint8_t>(quantize_code(x[i], params[i / st.group], g));
      }
      encode_row(st.type, st.group, codes.data(), params.data(), cols, out + r * row_bytes);
    }
  });
}

}  // namespace squeeze::compress
