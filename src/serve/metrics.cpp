#include "serve/metrics.h"

#include <charconv>

namespace squeeze::serve {

namespace {

// The shortest text that reads back as x ("0.025", not "0.025000000000000001").
std::string number(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

void append_value(std::string& out, const std::string& name, const char* type,
                  const std::string& help, double value) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  out += name + " " + number(value) + "\n";
}

}  // namespace

void append_histogram(std::string& out, const std::string& name, const std::string& help,
                      const Histogram& h) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    out += name + "_bucket{le=\"" + number(h.bounds[i]) + "\"} " + std::to_string(h.counts[i]) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(h.count) + "\n";
  out += name + "_sum " + number(h.sum) + "\n";
  out += name + "_count " + std::to_string(h.count) + "\n";
}

std::string prometheus_text(const EngineMetrics& m) {
  std::string out;
  auto counter = [&](const char* name, const char* help, int64_t v) {
    append_value(out, std::string("squeeze:") + name, "counter", help, static_cast<double>(v));
  };
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    append_value(out, std::string("squeeze:") + name, "gauge", help, static_cast<double>(v));
  };
  counter("prompt_tokens_total", "Prompt tokens of admitted requests.", m.prompt_tokens);
  counter("generated_tokens_total", "Generated tokens.", m.generated_tokens);
  counter("prefix_cache_hit_tokens_total", "Prompt tokens served by the prefix cache.",
          m.cached_tokens);
  counter("preemptions_total", "Sequences preempted for KV blocks (recomputed later).",
          m.preemptions);
  counter("steps_total", "Forward steps run.", m.steps);
  counter("split_steps_total", "Steps of decodes run as one-token passes (activation sparsity).",
          m.split_steps);
  gauge("sequences_running", "Sequences running.", m.running);
  gauge("sequences_waiting", "Sequences waiting for admission.", m.waiting);
  gauge("kv_blocks_used", "KV cache blocks referenced by sequences.", m.kv_blocks_used);
  gauge("kv_blocks_total", "KV cache blocks.", m.kv_blocks_total);
  gauge("kv_blocks_cached_idle", "Unreferenced KV blocks kept for the prefix cache.",
        m.kv_blocks_cached_idle);
  gauge("kv_bytes", "KV cache memory: fixed storage plus blocks held in half.", m.kv_bytes);
  gauge("kv_bytes_peak", "The most KV cache memory held so far.", m.kv_bytes_peak);
  append_histogram(out, "squeeze:time_to_first_token_seconds",
                   "Time from a request's arrival to its first generated token.",
                   m.time_to_first_token);
  append_histogram(out, "squeeze:inter_token_latency_seconds",
                   "Time between consecutive tokens of a sequence.", m.inter_token_latency);
  return out;
}

}  // namespace squeeze::serve
