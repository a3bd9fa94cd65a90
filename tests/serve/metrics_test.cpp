// Prometheus text of the engine's metrics: cumulative buckets, shortest bound labels.
#include "serve/metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace squeeze::serve {
namespace {

TEST(Metrics, HistogramBucketsAreCumulativeWithShortLabels) {
  Histogram h({0.025, 0.1, 1});
  h.observe(0.01);
  h.observe(0.05);
  h.observe(0.05);
  h.observe(7);
  std::string out;
  append_histogram(out, "x", "help", h);
  EXPECT_EQ(out,
            "# HELP x help\n# TYPE x histogram\n"
            "x_bucket{le=\"0.025\"} 1\n"
            "x_bucket{le=\"0.1\"} 3\n"
            "x_bucket{le=\"1\"} 3\n"
            "x_bucket{le=\"+Inf\"} 4\n"
            "x_sum 7.11\n"
            "x_count 4\n");
}

TEST(Metrics, EveryValueIsNamedAndTyped) {
  EngineMetrics m;
  m.generated_tokens = 12;
  m.kv_blocks_used = 3;
  const std::string text = prometheus_text(m);
  EXPECT_NE(text.find("# TYPE squeeze:generated_tokens_total counter\nsqueeze:generated_tokens_total 12\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE squeeze:kv_blocks_used gauge\nsqueeze:kv_blocks_used 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("squeeze:time_to_first_token_seconds_count 0\n"), std::string::npos);
}

}  // namespace
}  // namespace squeeze::serve
