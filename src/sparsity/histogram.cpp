#include "sparsity/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace squeeze::sparsity {

namespace {

constexpr int kShift = 23 - AbsHistogram::kMantissaBits;

constexpr int bin_of(float v) {
  return static_cast<int>((std::bit_cast<uint32_t>(v) & 0x7fffffffu) >> kShift);
}
constexpr float bin_low(int b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << kShift); }
constexpr float bin_high(int b) { return std::bit_cast<float>(static_cast<uint32_t>(b + 1) << kShift); }
// The bins at and above the one holding +inf are inf and NaN.
constexpr int kFirstNonFinite = bin_of(INFINITY);

}  // namespace

void AbsHistogram::add(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) ++bins_[bin_of(x[i])];
  total_ += static_cast<uint64_t>(n);
}

void AbsHistogram::merge(const AbsHistogram& other) {
  for (int b = 0; b < kBins; ++b) bins_[b] += other.bins_[b];
  total_ += other.total_;
}

float AbsHistogram::quantile(double q) const {
  if (q <= 0 || total_ == 0) return 0.0f;
  const double want = q * static_cast<double>(total_);
  double below = 0;
  for (int b = 0; b < kFirstNonFinite; ++b) {
    const double c = static_cast<double>(bins_[b]);
    if (c > 0 && below + c >= want) {
      const double share = (want - below) / c;  // of this bin's values lie below t
      const double lo = bin_low(b), hi = bin_high(b);
      return static_cast<float>(lo + share * (hi - lo));
    }
    below += c;
  }
  return std::numeric_limits<float>::max();  // above every finite value seen
}

double AbsHistogram::fraction_below(float t) const {
  if (total_ == 0 || !(t > 0)) return 0.0;
  const int tb = std::min(bin_of(t), kFirstNonFinite);
  double below = 0;
  for (int b = 0; b < tb; ++b) below += static_cast<double>(bins_[b]);
  if (tb < kFirstNonFinite) {
    const double lo = bin_low(tb), hi = bin_high(tb);
    below += static_cast<double>(bins_[tb]) * (static_cast<double>(t) - lo) / (hi - lo);
  }
  return below / static_cast<double>(total_);
}

}  // namespace squeeze::sparsity
