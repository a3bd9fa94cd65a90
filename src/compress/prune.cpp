#include "compress/prune.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/layer_ranges.h"

namespace squeeze::compress {

namespace {

// SparseGPT's block: an N:M group must not straddle two.
constexpr int kBlock = 128;

}  // namespace

PruneMethod parse_prune_method(std::string_view name) {
  std::string s(name);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "magnitude") return PruneMethod::Magnitude;
  if (s == "wanda") return PruneMethod::Wanda;
  if (s == "sparsegpt") return PruneMethod::SparseGpt;
  throw UsageError("unknown pruning method '" + std::string(name) +
                   "' (choose magnitude, wanda or sparsegpt)");
}

std::string_view prune_method_name(PruneMethod m) {
  switch (m) {
    case PruneMethod::None: return "none";
    case PruneMethod::Magnitude: return "magnitude";
    case PruneMethod::Wanda: return "wanda";
    case PruneMethod::SparseGpt: return "sparsegpt";
  }
  return "?";
}

void parse_nm_pattern(std::string_view text, PruneSpec& spec) {
  auto bad = [&] {
    return UsageError("--pattern wants N:M, N zeros in every M weights, e.g. 2:4 (got '" +
                      std::string(text) + "')");
  };
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) throw bad();
  auto number = [&](std::string_view part) {
    if (part.empty() || part.size() > 4 ||
        !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      throw bad();
    }
    return std::stoi(std::string(part));
  };
  spec.n = number(text.substr(0, colon));
  spec.m = number(text.substr(colon + 1));
  check_prune_spec(spec);
}

void check_prune_spec(const PruneSpec& s) {
  if (s.nm()) {
    if (s.n < 1 || s.n >= s.m) {
      throw UsageError("--pattern N:M needs 1 <= N < M (got " + std::to_string(s.n) + ":" +
                       std::to_string(s.m) + ")");
    }
    if (kBlock % s.m != 0) {
      throw UsageError("--pattern N:M needs M to divide 128 (got M = " + std::to_string(s.m) + ")");
    }
    return;
  }
  if (!s.active()) return;
  if (!(s.sparsity > 0.0 && s.sparsity < 1.0)) {
    throw UsageError("--sparsity must be in (0, 1)");
  }
}

PruneSpec PruneSpec::for_layer(int64_t il) const {
  PruneSpec s = *this;
  s.layer_sparsity.clear();
  if (il >= 0 && il < static_cast<int64_t>(layer_sparsity.size())) s.sparsity = layer_sparsity[il];
  return s;
}

double outlier_ratio(const std::vector<const std::vector<float>*>& scores, double m) {
  double sum = 0.0;
  int64_t n = 0;
  for (const auto* v : scores) {
    for (const float x : *v) sum += x;
    n += static_cast<int64_t>(v->size());
  }
  if (n == 0) return 0.0;
  const double limit = m * sum / static_cast<double>(n);
  int64_t above = 0;
  for (const auto* v : scores) {
    for (const float x : *v) above += x > limit;
  }
  return static_cast<double>(above) / static_cast<double>(n);
}

std::vector<double> owl_sparsities(const std::vector<double>& ratios, double target,
                                   double lambda) {
  if (ratios.empty()) return {};
  const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
  const double span = *hi - *lo;
  std::vector<double> d(ratios.size(), 0.0);
  double mean = 0.0;
  for (size_t i = 0; i < ratios.size(); ++i) {
    d[i] = span > 0.0 ? (ratios[i] - *lo) / span * 2.0 * lambda : 0.0;
    mean += d[i] / static_cast<double>(ratios.size());
  }
  std::vector<double> s(ratios.size());
  for (size_t i = 0; i < ratios.size(); ++i) {
    s[i] = std::clamp(target - (d[i] - mean), 0.0, 0.999);
  }
  return s;
}

std::vector<double> parse_layer_sparsity(const std::vector<std::string>& items, int64_t n_layer,
                                         double base) {
  std::vector<double> s(static_cast<size_t>(n_layer), base);
  for (const std::string& item : items) {
    const size_t eq = item.rfind('=');
    double f = -1.0;
    if (eq != std::string::npos) {
      const char* b = item.data() + eq + 1;
      const auto [end, ec] = std::from_chars(b, item.data() + item.size(), f);
      if (ec != std::errc() || end != item.data() + item.size() || b == end) f = -1.0;
    }
    if (eq == std::string::npos || !(f > 0.0 && f < 1.0)) {
      throw UsageError("--layer-sparsity wants RANGES=F with F in (0, 1), e.g. 0-9=0.3 (got '" +
                       item + "')");
    }
    const std::vector<uint8_t> set =
        parse_layer_ranges(std::string_view(item).substr(0, eq), n_layer, "--layer-sparsity");
    for (int64_t il = 0; il < n_layer; ++il) {
      if (set[il]) s[il] = f;
    }
  }
  return s;
}

std::string prune_pattern_text(const PruneSpec& s) {
  if (s.nm()) return std::to_string(s.n) + ":" + std::to_string(s.m);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%g%% unstructured", 100.0 * s.sparsity);
  return buf;
}

int64_t zeros_among(double s, int64_t count) {
  return std::clamp<int64_t>(std::llround(s * static_cast<double>(count)), 0, count);
}

std::vector<float> prune_scores(const float* w, int64_t rows, int64_t cols, PruneMethod method,
                                const std::vector<double>* h) {
  std::vector<float> norm(static_cast<size_t>(cols), 1.0f);
  if (method == PruneMethod::Wanda) {
    if (h == nullptr || static_cast<int64_t>(h->size()) != cols * cols) {
      throw Error("wanda: the Hessian of the matrix input is missing");
    }
    for (int64_t j = 0; j < cols; ++j) {
      norm[j] = static_cast<float>(std::sqrt(std::max(0.0, (*h)[j * cols + j])));
    }
  } else if (method != PruneMethod::Magnitude) {
    throw Error("prune_scores: only magnitude and wanda score weights on their own");
  }
  std::vector<float> s(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) s[r * cols + j] = std::fabs(w[r * cols + j]) * norm[j];
  }
  return s;
}

void mark_lowest(const float* scores, int64_t n, int64_t k, uint8_t* mask) {
  if (k <= 0) return;
  // N:M groups are small and many: their indices stay on the stack.
  std::array<int32_t, kBlock> small;
  std::vector<int32_t> large(n > kBlock ? static_cast<size_t>(n) : 0);
  int32_t* idx = n > kBlock ? large.data() : small.data();
  std::iota(idx, idx + n, 0);
  auto less = [&](int32_t a, int32_t b) {
    return scores[a] < scores[b] || (scores[a] == scores[b] && a < b);
  };
  std::nth_element(idx, idx + (k - 1), idx + n, less);
  for (int64_t i = 0; i < k; ++i) mask[idx[i]] = 1;
}

std::vector<uint8_t> row_mask(const float* scores, int64_t rows, int64_t cols,
                              const PruneSpec& s, ThreadPool& pool) {
  check_prune_spec(s);
  if (s.nm() && cols % s.m != 0) {
    throw UsageError("rows of " + std::to_string(cols) + " weights do not split into groups of " +
                     std::to_string(s.m));
  }
  std::vector<uint8_t> mask(static_cast<size_t>(rows * cols), 0);
  pool.parallel_for(rows, 4, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* sr = scores + r * cols;
      uint8_t* mr = mask.data() + r * cols;
      if (s.nm()) {
        for (int64_t c = 0; c < cols; c += s.m) mark_lowest(sr + c, s.m, s.n, mr + c);
      } else {
        mark_lowest(sr, cols, zeros_among(s.sparsity, cols), mr);
      }
    }
  });
  return mask;
}

}  // namespace squeeze::compress
