// What the server counts, for GET /metrics in Prometheus's text format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace squeeze::serve {

// A Prometheus histogram: cumulative counts of observations <= each bound, their sum, count.
struct Histogram {
  explicit Histogram(std::vector<double> bounds)
      : bounds(std::move(bounds)), counts(this->bounds.size(), 0) {}
  void observe(double x) {
    for (size_t i = 0; i < bounds.size(); ++i) counts[i] += x <= bounds[i];
    sum += x;
    ++count;
  }
  std::vector<double> bounds;
  std::vector<int64_t> counts;  // cumulative: observations <= bounds[i]
  double sum = 0;
  int64_t count = 0;
};

struct EngineMetrics {
  int64_t prompt_tokens = 0;     // prompt tokens of admitted requests (cached ones included)
  int64_t generated_tokens = 0;
  int64_t cached_tokens = 0;     // prompt tokens served by the prefix cache
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t split_steps = 0;       // steps of decodes run as one-token passes (split_policy.h)
  int64_t running = 0;           // sequences
  int64_t waiting = 0;           // sequences queued (a preempted one included)
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_cached_idle = 0;
  int64_t kv_bytes = 0;          // the cache's memory now (KvCache::bytes) and its peak
  int64_t kv_bytes_peak = 0;
  Histogram time_to_first_token{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram inter_token_latency{{0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
};

// The metrics in Prometheus's text exposition format, each name prefixed with "squeeze:".
std::string prometheus_text(const EngineMetrics& m);
// One histogram's lines (name_bucket{le=...}, name_sum, name_count) after its HELP and TYPE.
void append_histogram(std::string& out, const std::string& name, const std::string& help,
                      const Histogram& h);

}  // namespace squeeze::serve
