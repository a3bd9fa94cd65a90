// SplitPolicy: times both ways for each count of decodes, then runs the faster and now and then
// the other; Never / Always override; one decode, or more than kMaxSplit, never splits.
#include "serve/split_policy.h"

#include <gtest/gtest.h>

namespace squeeze::serve {
namespace {

// Runs `steps` steps of n decodes, each taking `batched` or `split` seconds the way it ran;
// returns how many ran split.
int run(SplitPolicy& p, int64_t n, int steps, double batched, double split) {
  int n_split = 0;
  for (int i = 0; i < steps; ++i) {
    const bool s = p.split(n);
    n_split += s;
    p.record(n, s, s ? split : batched);
  }
  return n_split;
}

TEST(SplitPolicy, TakesTheFasterWayAfterTimingBoth) {
  SplitPolicy p;
  EXPECT_EQ(run(p, 2, 2 * SplitPolicy::kTrials, 1.0, 2.0), SplitPolicy::kTrials) << "both timed";
  // Batched is faster for 2: split only on the retries.
  EXPECT_EQ(run(p, 2, 128, 1.0, 2.0), 128 / SplitPolicy::kRetryEvery);
  // Split is faster for 3 (counts are timed apart).
  run(p, 3, 2 * SplitPolicy::kTrials, 2.0, 1.0);
  EXPECT_EQ(run(p, 3, 128, 2.0, 1.0), 128 - 128 / SplitPolicy::kRetryEvery);
}

TEST(SplitPolicy, FollowsAChangeOfLoad) {
  SplitPolicy p;
  run(p, 4, 2 * SplitPolicy::kTrials, 1.0, 2.0);
  EXPECT_FALSE(p.split(4));
  // Splitting became faster: the retries see it and the moving average crosses over.
  run(p, 4, 20 * SplitPolicy::kRetryEvery, 1.0, 0.2);
  EXPECT_TRUE(p.split(4));
}

TEST(SplitPolicy, ModesAndLimits) {
  SplitPolicy never(SplitMode::Never), always(SplitMode::Always), automatic;
  EXPECT_FALSE(never.split(4));
  EXPECT_TRUE(always.split(4));
  EXPECT_FALSE(always.split(1));
  EXPECT_FALSE(always.split(SplitPolicy::kMaxSplit + 1));
  EXPECT_EQ(run(automatic, SplitPolicy::kMaxSplit + 1, 50, 9.0, 1.0), 0);
}

}  // namespace
}  // namespace squeeze::serve
