#include "sparsity/thresholds.h"

#include <cmath>

#include "core/error.h"

namespace squeeze::sparsity {

namespace {

constexpr const char* kMethod = "squeeze.sparsity.method";
constexpr const char* kAllocation = "squeeze.sparsity.allocation";
constexpr const char* kSites = "squeeze.sparsity.sites";
constexpr const char* kLevels = "squeeze.sparsity.levels";
constexpr const char* kThresholds = "squeeze.sparsity.thresholds";
constexpr const char* kLayers = "squeeze.sparsity.layer_count";
constexpr const char* kDefault = "squeeze.sparsity.default";
constexpr const char* kHead = "squeeze.sparsity.head_thresholds";

}  // namespace

std::string_view method_name(Method m) {
  return m == Method::Teal ? "teal" : m == Method::Cats ? "cats" : "relu";
}

Method parse_method(std::string_view s) {
  if (s == "teal") return Method::Teal;
  if (s == "cats") return Method::Cats;
  if (s == "relu") return Method::Relu;
  throw UsageError("unknown sparsity method '" + std::string(s) + "' (teal, cats, relu)");
}

int n_sites(Method m) { return m == Method::Teal ? int{kTealSites} : int{kCatsSites}; }

std::string_view site_name(Method m, int site) {
  if (m != Method::Teal) return "gate_act";
  static constexpr std::string_view names[kTealSites] = {"attn_in", "attn_out", "ffn_in",
                                                         "ffn_act"};
  return names[site];
}

std::vector<float> standard_levels() {
  std::vector<float> v;
  for (int i = 0; i < 100; ++i) v.push_back(static_cast<float>(i) / 100.0f);
  return v;
}

ThresholdTable ThresholdTable::relu(int64_t n_layer) {
  ThresholdTable t;
  t.method = Method::Relu;
  t.n_layer = n_layer;
  t.levels = {0.0f};
  t.default_level = 0.0f;
  t.thresholds.assign(static_cast<size_t>(n_layer), 0.0f);
  return t;
}

size_t ThresholdTable::level_index(double s) const {
  for (size_t i = 0; i < levels.size(); ++i) {
    if (std::fabs(levels[i] - s) < 1e-4) return i;
  }
  throw UsageError("the file's " + std::string(method_name(method)) +
                   " thresholds have no level " + std::to_string(s) + " (calibrated: " +
                   std::to_string(levels.front()) + " to " + std::to_string(levels.back()) +
                   " in " + std::to_string(levels.size()) + " levels)");
}

void ThresholdTable::write(gguf::Writer& w) const {
  w.add_string(kMethod, std::string(method_name(method)));
  w.add_string(kAllocation, allocation);
  std::vector<std::string> names;
  for (int s = 0; s < sites(); ++s) names.emplace_back(site_name(method, s));
  w.add_string_array(kSites, names);
  w.add_uint32(kLayers, static_cast<uint32_t>(n_layer));
  w.add_float32_array(kLevels, levels);
  w.add_float32_array(kThresholds, thresholds);
  w.add_float32(kDefault, default_level);
  if (!head.empty()) w.add_float32_array(kHead, head);
}

std::optional<ThresholdTable> ThresholdTable::read(const gguf::File& f) {
  const auto method = f.get_string(kMethod);
  if (!method) return std::nullopt;
  auto bad = [&](const std::string& why) {
    return FormatError(f.path() + ": invalid activation-sparsity table: " + why);
  };
  ThresholdTable t;
  if (*method != "teal" && *method != "cats" && *method != "relu") {
    throw bad("unknown method '" + std::string(*method) + "'");
  }
  t.method = parse_method(*method);
  t.allocation = std::string(f.get_string(kAllocation).value_or("uniform"));
  const std::vector<std::string_view> names = f.require_string_array(kSites);
  if (static_cast<int>(names.size()) != t.sites()) throw bad("wrong number of sites");
  for (int s = 0; s < t.sites(); ++s) {
    if (names[s] != site_name(t.method, s)) throw bad("unexpected site '" + std::string(names[s]) + "'");
  }
  t.n_layer = f.require_int(kLayers);
  t.levels = f.get_float_array(kLevels);
  t.thresholds = f.get_float_array(kThresholds);
  t.default_level = static_cast<float>(f.get_float(kDefault).value_or(0.5));
  if (t.n_layer <= 0 || t.n_layer > (1 << 16)) throw bad("bad layer count");
  if (t.levels.empty()) throw bad("no levels");
  for (size_t i = 0; i < t.levels.size(); ++i) {
    if (!(t.levels[i] >= 0 && t.levels[i] < 1) || (i > 0 && !(t.levels[i] > t.levels[i - 1]))) {
      throw bad("levels must ascend within [0, 1)");
    }
  }
  if (t.thresholds.size() != static_cast<size_t>(t.n_layer) * t.sites() * t.levels.size()) {
    throw bad("thresholds hold " + std::to_string(t.thresholds.size()) + " values, expected " +
              std::to_string(static_cast<size_t>(t.n_layer) * t.sites() * t.levels.size()));
  }
  for (float v : t.thresholds) {
    if (!std::isfinite(v) || v < 0) throw bad("a threshold is negative or not finite");
  }
  if (f.find(kHead) != nullptr) {
    if (t.method != Method::Teal) throw bad("head thresholds in a non-TEAL table");
    t.head = f.get_float_array(kHead);
    if (t.head.size() != t.levels.size()) {
      throw bad("head thresholds hold " + std::to_string(t.head.size()) + " values, expected " +
                std::to_string(t.levels.size()));
    }
    for (float v : t.head) {
      if (!std::isfinite(v) || v < 0) throw bad("a head threshold is negative or not finite");
    }
  }
  return t;
}

}  // namespace squeeze::sparsity
