// Whether a step of a few decodes runs as one batch or as one-token passes. With activation
// sparsity a one-token pass reads only the weights of the activations it keeps, while a batch
// runs dense products (the union of its tokens' kept activations is nearly dense), so below
// some batch size the split passes are faster and above it the batch is. Where the crossing
// lies depends on the model, the level and the machine: the policy times both ways for each
// count of decodes and takes the faster, trying the other way again now and then.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace squeeze::serve {

enum class SplitMode { Auto, Never, Always };

class SplitPolicy {
 public:
  static constexpr int64_t kMaxSplit = 8;  // steps of more decodes always run as one batch
  static constexpr int kTrials = 3;        // timings of each way before choosing
  static constexpr int kRetryEvery = 64;   // then one step of the slower way this often

  explicit SplitPolicy(SplitMode mode = SplitMode::Auto) : mode_(mode) {}

  // Whether a step of n decodes (n >= 1) should run as n one-token passes.
  bool split(int64_t n) {
    if (n < 2 || n > kMaxSplit || mode_ == SplitMode::Never) return false;
    if (mode_ == SplitMode::Always) return true;
    Stats& s = stats_[static_cast<size_t>(n)];
    if (s.batched.count < kTrials) return false;
    if (s.split.count < kTrials) return true;
    const bool faster = s.split.mean < s.batched.mean;
    return ++s.steps % kRetryEvery == 0 ? !faster : faster;
  }

  // How long a step of n decodes took, run one way.
  void record(int64_t n, bool split, double seconds) {
    if (n < 2 || n > kMaxSplit) return;
    Stats& s = stats_[static_cast<size_t>(n)];
    (split ? s.split : s.batched).add(seconds);
  }

 private:
  struct Mean {
    int count = 0;
    double mean = 0;
    // The plain mean of the first kTrials, then a moving average (the load changes).
    void add(double x) {
      ++count;
      mean += (x - mean) / (count <= kTrials ? count : 8);
    }
  };
  struct Stats {
    Mean batched, split;
    int64_t steps = 0;
  };
  SplitMode mode_;
  std::array<Stats, kMaxSplit + 1> stats_{};
};

}  // namespace squeeze::serve
