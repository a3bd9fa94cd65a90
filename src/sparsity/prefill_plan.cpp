#include "sparsity/prefill_plan.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "core/layer_ranges.h"

namespace squeeze::sparsity {

namespace {

constexpr std::string_view kPrefix = "squeeze.pop.";
constexpr const char* kScore = "squeeze.pop.score";
constexpr const char* kOrder = "squeeze.pop.layer_order";
constexpr const char* kScores = "squeeze.pop.layer_scores";
constexpr const char* kCalibFile = "squeeze.pop.calib.file";
constexpr const char* kCalibChunks = "squeeze.pop.calib.chunks";
constexpr const char* kCalibCtx = "squeeze.pop.calib.ctx";

constexpr std::string_view kHeadsPrefix = "squeeze.heads.";
constexpr const char* kHeadsScore = "squeeze.heads.score";
constexpr const char* kHeadsScores = "squeeze.heads.scores";
constexpr const char* kHeadsFile = "squeeze.heads.calib.file";
constexpr const char* kHeadsChunks = "squeeze.heads.calib.chunks";
constexpr const char* kHeadsCtx = "squeeze.heads.calib.ctx";

}  // namespace

bool PrefillPlan::is_key(std::string_view key) { return key.substr(0, kPrefix.size()) == kPrefix; }

void PrefillPlan::write(gguf::Writer& w) const {
  w.add_string(kScore, score);
  w.add_int32_array(kOrder, order);
  w.add_float32_array(kScores, scores);
  w.add_string(kCalibFile, calib_file);
  w.add_uint32(kCalibChunks, static_cast<uint32_t>(calib_chunks));
  w.add_uint32(kCalibCtx, static_cast<uint32_t>(calib_ctx));
}

PrefillPlan PrefillPlan::read(const gguf::File& f, int64_t n_layer) {
  PrefillPlan p;
  const auto score = f.get_string(kScore);
  if (!score) return p;
  auto bad = [&](const std::string& why) {
    return FormatError(f.path() + ": prefill skip plan (" + kOrder + "): " + why);
  };
  p.score = std::string(*score);
  const std::vector<int64_t> order = f.get_int_array(kOrder);
  p.scores = f.get_float_array(kScores);
  if (static_cast<int64_t>(order.size()) != n_layer || static_cast<int64_t>(p.scores.size()) != n_layer) {
    throw bad("expected " + std::to_string(n_layer) + " layers");
  }
  std::vector<uint8_t> seen(static_cast<size_t>(n_layer), 0);
  for (const int64_t il : order) {
    if (il < 0 || il >= n_layer || seen[il]++) throw bad("not a permutation of the layers");
    p.order.push_back(static_cast<int32_t>(il));
  }
  p.calib_file = std::string(f.get_string(kCalibFile).value_or(""));
  p.calib_chunks = f.get_int(kCalibChunks).value_or(0);
  p.calib_ctx = f.get_int(kCalibCtx).value_or(0);
  return p;
}

bool HeadRanking::is_key(std::string_view key) {
  return key.substr(0, kHeadsPrefix.size()) == kHeadsPrefix;
}

void HeadRanking::write(gguf::Writer& w) const {
  w.add_string(kHeadsScore, score);
  w.add_float32_array(kHeadsScores, scores);
  w.add_string(kHeadsFile, calib_file);
  w.add_uint32(kHeadsChunks, static_cast<uint32_t>(calib_chunks));
  w.add_uint32(kHeadsCtx, static_cast<uint32_t>(calib_ctx));
}

HeadRanking HeadRanking::read(const gguf::File& f, int64_t n_layer, int64_t n_head) {
  HeadRanking r;
  const auto score = f.get_string(kHeadsScore);
  if (!score) return r;
  r.score = std::string(*score);
  r.scores = f.get_float_array(kHeadsScores);
  if (static_cast<int64_t>(r.scores.size()) != n_layer * n_head) {
    throw FormatError(f.path() + ": " + kHeadsScores + " has " + std::to_string(r.scores.size()) +
                      " entries for " + std::to_string(n_layer) + " layers x " +
                      std::to_string(n_head) + " heads");
  }
  for (const float s : r.scores) {
    if (!std::isfinite(s)) throw FormatError(f.path() + ": " + kHeadsScores + " holds a non-finite score");
  }
  r.calib_file = std::string(f.get_string(kHeadsFile).value_or(""));
  r.calib_chunks = f.get_int(kHeadsChunks).value_or(0);
  r.calib_ctx = f.get_int(kHeadsCtx).value_or(0);
  return r;
}

std::vector<uint8_t> parse_prefill_skip(std::string_view spec, int64_t n_layer,
                                        const PrefillPlan& plan) {
  std::vector<uint8_t> set(static_cast<size_t>(n_layer), 0);
  if (spec.empty() || spec == "none") return {};
  if (spec.substr(0, 5) == "auto:") {
    const std::string r(spec.substr(5));
    double frac = -1;
    const auto [end, ec] = std::from_chars(r.data(), r.data() + r.size(), frac);
    if (r.empty() || ec != std::errc() || end != r.data() + r.size() || !(frac >= 0 && frac <= 1)) {
      throw UsageError("--prefill-skip '" + std::string(spec) + "': R must be a fraction in 0..1");
    }
    if (plan.order.empty()) {
      throw UsageError("--prefill-skip auto needs a model calibrated by `squeeze prune-prefill` "
                       "(this file has no squeeze.pop.layer_order); or give layers, e.g. 20-27");
    }
    const auto k = static_cast<int64_t>(std::lround(frac * static_cast<double>(n_layer)));
    for (int64_t i = 0; i < k; ++i) set[plan.order[i]] = 1;
    return set;
  }
  return parse_layer_ranges(spec, n_layer, "--prefill-skip");
}

std::string prefill_skip_text(const std::vector<uint8_t>& set) {
  std::string out;
  const auto n = static_cast<int64_t>(set.size());
  for (int64_t il = 0; il < n;) {
    if (set[il] == 0) {
      ++il;
      continue;
    }
    int64_t end = il;
    while (end + 1 < n && set[end + 1] != 0) ++end;
    if (!out.empty()) out += ',';
    out += std::to_string(il);
    if (end > il) {
      out += '-';
      out += std::to_string(end);
    }
    il = end + 1;
  }
  return out.empty() ? "none" : out;
}

}  // namespace squeeze::sparsity
