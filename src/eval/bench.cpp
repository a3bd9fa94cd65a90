#include "eval/bench.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "core/cpu.h"
#include "core/error.h"
#include "core/timer.h"

namespace squeeze::eval {

using json = nlohmann::ordered_json;

std::string BenchTest::name() const {
  std::string s = (kind == BenchKind::Prompt ? "pp" : "tg") + std::to_string(n_tokens);
  if (n_seq > 1) s.append("x").append(std::to_string(n_seq));
  if (depth > 0) s.append("@d").append(std::to_string(depth));
  return s;
}

std::vector<BenchTest> bench_tests(const BenchOptions& opt) {
  if (opt.reps < 1) throw UsageError("-r must be at least 1, got " + std::to_string(opt.reps));
  std::vector<BenchTest> tests;
  for (int64_t n : opt.n_prompt) {
    if (n < 0) throw UsageError("-p must be >= 0, got " + std::to_string(n));
    if (n > 0) tests.push_back({BenchKind::Prompt, n});
  }
  for (int64_t d : opt.depth) {
    if (d < 0) throw UsageError("-d must be >= 0, got " + std::to_string(d));
  }
  for (int64_t p : opt.parallel) {
    if (p < 1) throw UsageError("--parallel must be >= 1, got " + std::to_string(p));
  }
  for (int64_t n : opt.n_gen) {
    if (n < 0) throw UsageError("-n must be >= 0, got " + std::to_string(n));
    if (n == 0) continue;
    for (int64_t p : opt.parallel) tests.push_back({BenchKind::Gen, n, p});
  }
  if (tests.empty()) throw UsageError("nothing to run: -p and -n are both 0");
  std::vector<BenchTest> at_depths;
  for (const BenchTest& t : tests) {
    for (const int64_t d : opt.depth) {
      at_depths.push_back(t);
      at_depths.back().depth = d;
    }
  }
  return at_depths;
}

int64_t bench_ctx_size(const std::vector<BenchTest>& tests) {
  int64_t n = 1;
  for (const BenchTest& t : tests) n = std::max(n, t.depth + t.n_tokens);
  return n;
}

int64_t bench_n_seq(const std::vector<BenchTest>& tests) {
  int64_t n = 1;
  for (const BenchTest& t : tests) n = std::max(n, t.n_seq);
  return n;
}

double gen_bytes_per_token(const model::Model& m) {
  // A MoE token reads n_expert_used of each layer's n_expert experts.
  double unread = 0;
  const model::HParams& hp = m.hparams();
  for (const model::LayerWeights& L : m.layers) {
    for (const model::ExpertMlp& e : L.experts) {
      for (const ops::WeightView* w : {&e.gate, &e.up, &e.down}) {
        unread += static_cast<double>(w->n_rows) * static_cast<double>(w->row_bytes);
      }
    }
  }
  if (hp.n_expert > 0) unread *= 1.0 - static_cast<double>(hp.n_expert_used) / hp.n_expert;
  return static_cast<double>(m.weight_bytes()) - unread;
}

double prompt_flop(const model::Model& m, int64_t n_tokens) {
  auto macs = [](const ops::WeightView& w) {
    return static_cast<double>(w.n_rows) * static_cast<double>(w.n_cols);
  };
  double layer_macs = 0;  // per token, all layers
  for (const model::LayerWeights& L : m.layers) {
    layer_macs += macs(L.wq) + macs(L.wk) + macs(L.wv) + macs(L.wo) + macs(L.ffn_gate) +
                  macs(L.ffn_up) + macs(L.ffn_down) + macs(L.ffn_gate_inp);
    if (!L.experts.empty()) {  // each token through n_expert_used experts
      const model::ExpertMlp& e = L.experts[0];
      layer_macs += static_cast<double>(m.hparams().n_expert_used) *
                    (macs(e.gate) + macs(e.up) + macs(e.down));
    }
  }
  const model::HParams& hp = m.hparams();
  const double n = static_cast<double>(n_tokens);
  // Token i sees i+1 positions: head_dim MACs for q.k and head_dim for p.v each.
  const double attn_macs = static_cast<double>(hp.n_layer * hp.n_head) * 2.0 *
                           static_cast<double>(hp.head_dim) * n * (n + 1) / 2;
  return 2.0 * (n * layer_macs + macs(m.output) + attn_macs);
}

namespace {

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int64_t n, int64_t n_vocab) {
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(n_vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = dist(rng);
  return t;
}

// The test's sequences filled with `depth` random tokens (their logits not computed).
void fill_depth(model::Context& ctx, const BenchTest& test, std::mt19937_64& rng) {
  for (int64_t s = 0; s < test.n_seq; ++s) {
    ctx.reset(s);
    if (test.depth == 0) continue;
    const std::vector<int32_t> tokens = random_tokens(rng, test.depth, ctx.model().hparams().n_vocab);
    model::Batch b;
    for (int64_t i = 0; i < test.depth; ++i) b.add(tokens[i], static_cast<int32_t>(i), static_cast<int32_t>(s), false);
    ctx.decode_batch(b);
  }
}

// One repetition from sequences of test.depth tokens; returns the seconds spent in decode. tg
// with n_seq sequences decodes one batch of n_seq tokens (one per sequence, logits of each) per
// step.
double run_once(model::Context& ctx, const BenchTest& test, int64_t n_tokens,
                std::mt19937_64& rng) {
  const std::vector<int32_t> tokens =
      random_tokens(rng, n_tokens * test.n_seq, ctx.model().hparams().n_vocab);
  for (int64_t s = 0; s < test.n_seq; ++s) ctx.truncate(test.depth, s);
  const auto p0 = static_cast<int32_t>(test.depth);
  if (test.kind == BenchKind::Prompt) {
    const Timer timer;
    ctx.decode(tokens);
    return timer.seconds();
  }
  if (test.n_seq == 1) {
    const Timer timer;
    for (size_t i = 0; i < tokens.size(); ++i) ctx.decode(std::span<const int32_t>(&tokens[i], 1));
    return timer.seconds();
  }
  std::vector<model::Batch> steps(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) {
    for (int64_t s = 0; s < test.n_seq; ++s) {
      steps[i].add(tokens[i * test.n_seq + s], p0 + static_cast<int32_t>(i), static_cast<int32_t>(s),
                   true);
    }
  }
  const Timer timer;
  for (const model::Batch& b : steps) ctx.decode_batch(b);
  return timer.seconds();
}

}  // namespace

BenchResult run_bench(model::Context& ctx, const BenchTest& test, int reps, bool warmup,
                      uint64_t seed) {
  if (test.depth + test.n_tokens > ctx.n_ctx()) {
    throw UsageError(test.name() + " needs a context of " + std::to_string(test.depth + test.n_tokens) +
                     " tokens, the bench context has " + std::to_string(ctx.n_ctx()));
  }
  if (test.n_seq > ctx.n_seq()) {
    throw UsageError(test.name() + " needs " + std::to_string(test.n_seq) +
                     " sequences, the bench context has " + std::to_string(ctx.n_seq()));
  }
  std::mt19937_64 rng(seed);
  fill_depth(ctx, test, rng);
  if (warmup) run_once(ctx, test, test.kind == BenchKind::Prompt ? test.n_tokens : 1, rng);
  BenchResult r;
  r.test = test;
  for (int i = 0; i < reps; ++i) {
    const double attn0 = ctx.sparsity_counters().attn_seconds;
    const double s = run_once(ctx, test, test.n_tokens, rng);
    r.samples_s.push_back(s);
    r.samples_attn_s.push_back(ctx.sparsity_counters().attn_seconds - attn0);
    r.samples_ts.push_back(static_cast<double>(test.n_tokens * test.n_seq) / std::max(s, 1e-12));
  }
  const double n = static_cast<double>(r.samples_ts.size());
  r.avg_ts = std::accumulate(r.samples_ts.begin(), r.samples_ts.end(), 0.0) / n;
  double ss = 0;
  for (double x : r.samples_ts) ss += (x - r.avg_ts) * (x - r.avg_ts);
  r.stddev_ts = r.samples_ts.size() > 1 ? std::sqrt(ss / (n - 1)) : 0.0;
  std::vector<double> sorted = r.samples_ts;
  std::sort(sorted.begin(), sorted.end());
  const size_t mid = sorted.size() / 2;
  r.median_ts = sorted.size() % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  const model::Model& m = ctx.model();
  if (test.kind == BenchKind::Gen) {
    // The weights are read once per step, for all the step's sequences.
    r.gb_per_s = gen_bytes_per_token(m) * r.avg_ts / static_cast<double>(test.n_seq) / 1e9;
  } else {
    r.gflop_per_s = prompt_flop(m, test.n_tokens) / static_cast<double>(test.n_tokens) *
                    r.avg_ts / 1e9;
  }
  return r;
}

BenchReport make_report(const model::Model& m, const std::string& path, int threads,
                        int64_t n_batch, int64_t n_ctx, int reps) {
  BenchReport r;
  r.model_path = path;
  r.file_bytes = m.file().file_size();
  r.weight_bytes = m.weight_bytes();
  std::map<formats::DType, size_t> by_type;
  auto add = [&](const ops::WeightView& w) {
    by_type[w.type] += w.row_bytes * static_cast<size_t>(w.n_rows);
  };
  add(m.output);
  for (const model::LayerWeights& L : m.layers) {
    for (const ops::WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up,
                                     &L.ffn_down}) {
      add(*w);
    }
  }
  const auto top = std::max_element(by_type.begin(), by_type.end(),
                                    [](auto& a, auto& b) { return a.second < b.second; });
  r.weights_type = top == by_type.end() ? "?" : std::string(formats::format_info(top->first).name);
  if (top != by_type.end()) r.weights_format = top->first;
  r.threads = threads;
  r.isa = std::string(isa_name(active_isa()));
  r.n_batch = n_batch;
  r.n_ctx = n_ctx;
  r.reps = reps;
  return r;
}

namespace {

// The fraction of the roof a result reached: GB/s over read bandwidth for tg, the counted work
// per second over the prefill roof for pp.
std::optional<double> roof_fraction(const BenchReport& rep, const BenchResult& r) {
  if (!rep.roof) return std::nullopt;
  if (r.gb_per_s && rep.roof->read_gb_per_s > 0) return *r.gb_per_s / rep.roof->read_gb_per_s;
  if (r.gflop_per_s && rep.roof->prefill_gop_per_s > 0) {
    return *r.gflop_per_s / rep.roof->prefill_gop_per_s;
  }
  return std::nullopt;
}

json opt_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

std::string report_json(const BenchReport& rep) {
  json results = json::array();
  for (const BenchResult& r : rep.results) {
    const bool pp = r.test.kind == BenchKind::Prompt;
    results.push_back({{"test", r.test.name()},
                       {"n_prompt", pp ? r.test.n_tokens : 0},
                       {"n_gen", pp ? 0 : r.test.n_tokens},
                       {"n_seq", r.test.n_seq},
                       {"n_depth", r.test.depth},
                       {"samples_s", r.samples_s},
                       {"samples_ts", r.samples_ts},
                       {"samples_attn_s", r.samples_attn_s},
                       {"avg_ts", r.avg_ts},
                       {"stddev_ts", r.stddev_ts},
                       {"median_ts", r.median_ts},
                       {"gb_per_s", opt_json(r.gb_per_s)},
                       {"gflop_per_s", opt_json(r.gflop_per_s)},
                       {"roof_fraction", opt_json(roof_fraction(rep, r))}});
  }
  json roof = nullptr;
  if (rep.roof) {
    roof = {{"read_gb_per_s", rep.roof->read_gb_per_s},
            {"fma_gflop_per_s", rep.roof->fma_gflop_per_s},
            {"prefill_roof", rep.roof->prefill_name},
            {"prefill_gop_per_s", rep.roof->prefill_gop_per_s},
            {"source", rep.roof->source}};
  }
  return json{{"model", rep.model_path},  {"file_bytes", rep.file_bytes},
              {"weight_bytes", rep.weight_bytes}, {"weights_type", rep.weights_type},
              {"threads", rep.threads},   {"isa", rep.isa},
              {"n_batch", rep.n_batch},   {"n_ctx", rep.n_ctx},
              {"reps", rep.reps},         {"roof", roof},
              {"results", results}}
      .dump(2);
}

std::string report_text(const BenchReport& rep) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "model: " << rep.model_path << " (" << rep.weights_type << ", file "
     << static_cast<double>(rep.file_bytes) / 1e6 << " MB, weights read per token "
     << static_cast<double>(rep.weight_bytes) / 1e6 << " MB)\n"
     << "threads: " << rep.threads << ", isa: " << rep.isa << ", batch: " << rep.n_batch
     << ", ctx: " << rep.n_ctx << ", reps: " << rep.reps << " after a warm-up\n";
  if (rep.roof) {
    os.precision(1);
    os << "roof: read " << rep.roof->read_gb_per_s << " GB/s, prefill " << rep.roof->prefill_name
       << " " << rep.roof->prefill_gop_per_s << " G(FL)OP/s (" << rep.roof->source << ")\n";
  } else {
    os << "roof: unknown (run `squeeze bench --machine` once, or pass --roof-gbs/--roof-gflops)\n";
  }
  os << "\n| test | t/s (mean ± sd) | median t/s | GB/s | GFLOP/s | of roof |\n"
     << "|---|---:|---:|---:|---:|---:|\n";
  for (const BenchResult& r : rep.results) {
    os.precision(2);
    os << "| " << r.test.name() << " | " << r.avg_ts << " ± " << r.stddev_ts << " | "
       << r.median_ts << " | ";
    os.precision(1);
    if (r.gb_per_s) os << *r.gb_per_s;
    os << " | ";
    if (r.gflop_per_s) os << *r.gflop_per_s;
    os << " | ";
    if (auto f = roof_fraction(rep, r)) os << *f * 100 << "%";
    os << " |\n";
  }
  return os.str();
}

}  // namespace squeeze::eval
