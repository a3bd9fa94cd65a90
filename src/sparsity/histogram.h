// A histogram of |x| with logarithmic bins, for the quantiles that activation thresholds come
// from. Bins are read straight off the float's bits (8 exponent bits and the top 6 mantissa
// bits), so every bin is 1/64 of an octave wide (< 1.6% relative) over the whole float range,
// adding is a shift and an increment, and memory is fixed (16384 counters) however many
// activations are seen.
#pragma once

#include <array>
#include <cstdint>

namespace squeeze::sparsity {

class AbsHistogram {
 public:
  static constexpr int kMantissaBits = 6;
  static constexpr int kBins = 1 << (8 + kMantissaBits);

  void add(const float* x, int64_t n);
  void merge(const AbsHistogram& other);
  uint64_t count() const { return total_; }
  // The threshold t for which a fraction q of the values seen have |x| < t (linear within a
  // bin). q <= 0 gives 0 (nothing below); q >= 1 the top of the largest bin. Non-finite values
  // count as larger than any threshold.
  float quantile(double q) const;
  // Fraction of the values seen with |x| < t (at bin resolution: whole bins below t's bin,
  // plus a linear share of t's own).
  double fraction_below(float t) const;

 private:
  std::array<uint64_t, kBins> bins_{};
  uint64_t total_ = 0;
};

}  // namespace squeeze::sparsity
