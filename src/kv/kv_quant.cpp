#include "kv/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <queue>
#include <utility>
#include <vector>

#include "core/error.h"

namespace squeeze::kv {

namespace {

inline uint32_t encode(float x, float min, float inv_scale, uint32_t top, const float* levels) {
  if (levels != nullptr) return nearest_level(levels, top, (x - min) * inv_scale);
  const float c = std::nearbyint((x - min) * inv_scale);
  return c <= 0 ? 0 : std::min(static_cast<uint32_t>(c), top);
}

inline void put(uint8_t* codes, int64_t i, int bits, uint32_t code) {
  const int64_t bit = i * bits;
  codes[bit / 8] = static_cast<uint8_t>(codes[bit / 8] | (code << (bit % 8)));
}


}  // namespace

QuantParams fit_group(float lo, float hi, int bits) {
  const float levels = static_cast<float>((1 << bits) - 1);
  QuantParams p;
  p.min = f32_to_f16(lo);
  const float min = f16_to_f32(p.min);
  p.scale = f32_to_f16(std::max(0.0f, hi - min) / levels);
  return p;
}

KvType parse_kv_type(std::string_view name) {
  if (name == "f16") return KvType::F16;
  if (name == "q8") return KvType::Q8;
  if (name == "q4") return KvType::Q4;
  if (name == "q2") return KvType::Q2;
  throw UsageError("unknown KV cache type '" + std::string(name) + "' (f16, q8, q4, q2)");
}

std::string kv_type_name(KvType t) {
  switch (t) {
    case KvType::F16: return "f16";
    case KvType::Q8: return "q8";
    case KvType::Q4: return "q4";
    case KvType::Q2: return "q2";
  }
  return "?";
}

KeyAxis parse_key_axis(std::string_view name) {
  if (name == "channel") return KeyAxis::Channel;
  if (name == "token") return KeyAxis::Token;
  throw UsageError("unknown key quantization axis '" + std::string(name) + "' (channel, token)");
}

int kv_bits(KvType t) {
  switch (t) {
    case KvType::F16: return 16;
    case KvType::Q8: return 8;
    case KvType::Q4: return 4;
    case KvType::Q2: return 2;
  }
  return 16;
}

std::string describe(const KvOptions& o) {
  if (!o.quantized()) return "f16";
  std::string d = kv_type_name(o.type) + " (keys per " +
                  (o.k_axis == KeyAxis::Channel ? "channel" : "token") +
                  (o.k_prerope ? " before RoPE" : "") + ", values per token, group " +
                  std::to_string(o.group) + ", recent " + std::to_string(o.recent) + ", sinks " +
                  std::to_string(o.sinks);
  if (o.outliers > 0) {
    char f[32];
    std::snprintf(f, sizeof(f), ", outliers %g", o.outliers);
    d += f;
  }
  if (o.codebook) d += ", codebook";
  return d + ")";
}

void check_kv_options(const KvOptions& o, int64_t row) {
  if (!o.quantized()) return;
  if (o.group < 1 || row % o.group != 0) {
    throw UsageError("--kv-group " + std::to_string(o.group) + " must divide the KV row of " +
                     std::to_string(row) + " values (n_head_kv * head_dim)");
  }
  if (o.recent < 0 || o.sinks < 0) throw UsageError("--kv-recent and --kv-sinks cannot be negative");
  if (!(o.outliers >= 0 && o.outliers <= 0.5)) {
    throw UsageError("--kv-outliers " + std::to_string(o.outliers) + " must be a fraction in [0, 0.5]");
  }
  if (o.outliers > 0 && (row > 65535 || block_tokens(o) > 65535)) {
    throw UsageError("--kv-outliers needs a KV row and a block of at most 65535 values");
  }
  if (o.codebook && o.type == KvType::Q8) throw UsageError("--kv-codebook is for q4 and q2 codes, not q8");
}

int64_t outlier_count(const KvOptions& o, int64_t block, int64_t row) {
  return o.quantized() ? std::llround(o.outliers * static_cast<double>(block * row)) : 0;
}

int64_t take_outliers(float* x, int64_t n_rows, int64_t width, int64_t group, bool by_column,
                      int64_t n, Outlier* out, float* original) {
  const int64_t per_row = width / group;
  const int64_t n_groups = by_column ? width : n_rows * per_row;
  const int64_t size = by_column ? n_rows : group;
  // Entry i of group g (in x's order) at x[at(g, i)].
  auto at = [&](int64_t g, int64_t i) {
    return by_column ? i * width + g : (g / per_row) * width + (g % per_row) * group + i;
  };
  // Each group's entries sorted by value; the group keeps order[lo..hi].
  std::vector<int64_t> order(static_cast<size_t>(n_groups * size));
  std::vector<int64_t> lo(static_cast<size_t>(n_groups), 0), hi(static_cast<size_t>(n_groups), size - 1);
  for (int64_t g = 0; g < n_groups; ++g) {
    int64_t* o = order.data() + g * size;
    for (int64_t i = 0; i < size; ++i) o[i] = at(g, i);
    std::stable_sort(o, o + size, [&](int64_t a, int64_t b) { return x[a] < x[b]; });
  }
  // The gain of dropping group g's better end, and whether that end is the top (-1: none left).
  auto best = [&](int64_t g) -> std::pair<double, bool> {
    const int64_t l = lo[static_cast<size_t>(g)], h = hi[static_cast<size_t>(g)];
    if (h - l < 2) return {-1.0, false};
    const int64_t* o = order.data() + g * size;
    auto sq = [](double d) { return d * d; };
    const double range = sq(static_cast<double>(x[o[h]]) - x[o[l]]);
    const double top = range - sq(static_cast<double>(x[o[h - 1]]) - x[o[l]]);
    const double bottom = range - sq(static_cast<double>(x[o[h]]) - x[o[l + 1]]);
    return top >= bottom ? std::pair{top, true} : std::pair{bottom, false};
  };
  std::priority_queue<std::pair<double, int64_t>> heap;
  for (int64_t g = 0; g < n_groups; ++g) {
    if (const double gain = best(g).first; gain >= 0) heap.emplace(gain, g);
  }
  std::vector<std::pair<int64_t, int64_t>> taken;  // (entry, group)
  while (static_cast<int64_t>(taken.size()) < n && !heap.empty()) {
    const int64_t g = heap.top().second;
    heap.pop();
    const bool top = best(g).second;
    int64_t& end = top ? hi[static_cast<size_t>(g)] : lo[static_cast<size_t>(g)];
    taken.emplace_back(order[static_cast<size_t>(g * size + end)], g);
    end += top ? -1 : 1;
    if (const double gain = best(g).first; gain >= 0) heap.emplace(gain, g);
  }
  // By column, then row: a kv head's outliers are one run (attention reads them head by head).
  std::sort(taken.begin(), taken.end(), [width](const auto& a, const auto& b) {
    return std::pair(a.first % width, a.first / width) < std::pair(b.first % width, b.first / width);
  });
  for (size_t i = 0; i < taken.size(); ++i) {
    const auto [e, g] = taken[i];
    const int64_t* o = order.data() + g * size;
    original[i] = x[e];
    x[e] = std::clamp(x[e], x[o[lo[static_cast<size_t>(g)]]], x[o[hi[static_cast<size_t>(g)]]]);
    out[i] = {static_cast<uint16_t>(e / width), static_cast<uint16_t>(e % width), 0};
  }
  return static_cast<int64_t>(taken.size());
}

int64_t block_tokens(const KvOptions& o) {
  return o.quantized() && o.k_axis == KeyAxis::Channel ? o.group : 16;
}

void quantize_row_groups(const float* x, int64_t width, int64_t group, int bits, uint8_t* codes,
                         QuantParams* params, const float* levels) {
  std::memset(codes, 0, packed_bytes(width, bits));
  const auto top = static_cast<uint32_t>((1 << bits) - 1);
  for (int64_t g0 = 0; g0 < width; g0 += group) {
    const auto [lo, hi] = std::minmax_element(x + g0, x + g0 + group);
    const QuantParams p = fit_group(*lo, *hi, bits);
    params[g0 / group] = p;
    const float scale = f16_to_f32(p.scale), min = f16_to_f32(p.min);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t c = g0; c < g0 + group; ++c) put(codes, c, bits, encode(x[c], min, inv, top, levels));
  }
}

void quantize_columns(const float* x, int64_t n_rows, int64_t width, int bits, uint8_t* codes,
                      QuantParams* params, const float* levels) {
  const size_t col_bytes = packed_bytes(n_rows, bits);
  std::memset(codes, 0, col_bytes * static_cast<size_t>(width));
  const auto top = static_cast<uint32_t>((1 << bits) - 1);
  for (int64_t c = 0; c < width; ++c) {
    float lo = x[c], hi = x[c];
    for (int64_t r = 1; r < n_rows; ++r) {
      lo = std::min(lo, x[r * width + c]);
      hi = std::max(hi, x[r * width + c]);
    }
    params[c] = fit_group(lo, hi, bits);
  }
  for (int64_t c = 0; c < width; ++c) {
    uint8_t* col = codes + static_cast<size_t>(c) * col_bytes;
    const float scale = f16_to_f32(params[c].scale), min = f16_to_f32(params[c].min);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t r = 0; r < n_rows; ++r) put(col, r, bits, encode(x[r * width + c], min, inv, top, levels));
  }
}

void dequantize_row(const uint8_t* codes, const QuantParams* params, int64_t width, int64_t group,
                    int bits, f16_t* out, const float* levels) {
  for (int64_t g0 = 0; g0 < width; g0 += group) {
    const QuantParams& p = params[g0 / group];
    const float scale = f16_to_f32(p.scale), min = f16_to_f32(p.min);
    for (int64_t c = g0; c < g0 + group; ++c) {
      out[c] = f32_to_f16(min + code_value(codes, c, bits, levels) * scale);
    }
  }
}

void dequantize_column_row(const uint8_t* codes, const QuantParams* params, int64_t n_rows,
                           int64_t width, int bits, int64_t r, f16_t* out, const float* levels) {
  const size_t col_bytes = packed_bytes(n_rows, bits);
  for (int64_t c = 0; c < width; ++c) {
    const float code = code_value(codes + static_cast<size_t>(c) * col_bytes, r, bits, levels);
    out[c] = f32_to_f16(f16_to_f32(params[c].min) + code * f16_to_f32(params[c].scale));
  }
}

}  // namespace squeeze::kv
