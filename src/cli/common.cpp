#include "cli/common.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <sstream>
#include <fstream>
#include <iostream>

#include "compress/domains.h"
#include "compress/output.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "sparsity/prefill_plan.h"

namespace squeeze::cli {

namespace fs = std::filesystem;

std::optional<std::string> find_default_file(const fs::path& first, const fs::path& relative) {
  std::vector<fs::path> candidates = {first};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); dir.has_relative_path(); dir = dir.parent_path()) {
      candidates.push_back(dir / relative);
    }
  }
  for (const fs::path& p : candidates) {
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return std::nullopt;
}

std::string resolve_model_path(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("SQUEEZE_MODEL"); env != nullptr && *env != '\0') return env;
  const fs::path relative = fs::path("models") / kDefaultModelFile;
  if (auto p = find_default_file(fs::current_path() / relative, relative)) return *p;
  throw UsageError(std::string("no model given (-m) and the default model ") + kDefaultModelFile +
                   " is not cached in models/; fetch it with scripts/fetch_model.sh");
}

void ModelOptions::add_to(CLI::App& app) {
  app.add_option("-m,--model", model, "GGUF model file (default: models/" +
                                          std::string(kDefaultModelFile) + ")");
  app.add_option("-c,--ctx", n_ctx, "context size in tokens (KV cache capacity)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("-t,--threads", threads, "threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  add_act_sparsity_option(app, act_sparsity);
  add_prefill_options(app, prefill);
  kv.add_to(app);
}

void KvCacheOptions::add_to(CLI::App& app) {
  app.add_option("--kv-type", type,
                 "KV cache storage: f16, or q8 / q4 / q2 codes (KIVI: keys per channel, values per "
                 "token, a recent window in f16)")
      ->capture_default_str();
  quant_only = {
      app.add_option("--kv-k-axis", k_axis,
                     "quantized keys share a scale per channel (over a block of --kv-group tokens) "
                     "or per token (over --kv-group channels)")
          ->capture_default_str(),
      app.add_option("--kv-group", parsed.group,
                     "values per scale: channels of a value (and of a key per token), tokens of a "
                     "key channel")
          ->capture_default_str(),
      app.add_option("--kv-recent", parsed.recent,
                     "newest tokens kept in f16 (whole blocks; KIVI's R)")
          ->capture_default_str(),
      app.add_option("--kv-sinks", parsed.sinks, "first tokens kept in f16 (whole blocks)")
          ->capture_default_str(),
      app.add_option("--kv-outliers", parsed.outliers,
                     "fraction of each frozen block's keys and of its values kept aside in f16 "
                     "(KVQuant's dense-and-sparse: 0.01), the codes fitting the rest")
          ->capture_default_str(),
      app.add_flag("--kv-k-prerope", parsed.k_prerope,
                   "quantize keys before RoPE (KVQuant), rotating them back as they are read"),
      app.add_flag("--kv-codebook", parsed.codebook,
                   "q4 / q2 codes stand for the model's calibrated levels (squeeze calibrate-kv) "
                   "instead of a uniform grid")};
}

kv::KvOptions KvCacheOptions::resolved() const {
  kv::KvOptions o = parsed;
  o.type = kv::parse_kv_type(type);
  o.k_axis = kv::parse_key_axis(k_axis);
  if (!o.quantized()) {
    for (const CLI::Option* opt : quant_only) {
      if (opt->count() > 0) throw UsageError(opt->get_name() + " needs a quantized --kv-type (q8, q4, q2)");
    }
  }
  return o;
}

void EvictCliOptions::add_to(CLI::App& app) {
  using P = kv::EvictPolicy;
  app.add_option("--kv-evict", policy,
                 "KV token eviction past --kv-budget: none, streaming (sinks + recent), h2o "
                 "(heavy hitters + recent), snapkv (last queries' pooled attention), vatp "
                 "(attention x |v|_1), a2sf (decayed attention), keyformer (Gumbel-softmax "
                 "attention)")
      ->capture_default_str();
  budget_opt = app.add_option("--kv-budget", budget,
                              "tokens a sequence keeps with --kv-evict: a count, or a fraction of --ctx");
  const std::vector<P> scored = {P::H2O, P::SnapKV, P::VATP, P::A2SF, P::Keyformer};
  std::vector<P> all = scored;
  all.push_back(P::Streaming);
  policy_only = {
      {app.add_option("--kv-evict-sinks", parsed.sinks,
                      "first tokens always kept (default: streaming 4, others 0)"), all},
      {app.add_option("--kv-evict-recent", parsed.recent,
                      "newest tokens always kept (default: streaming the rest of the budget, "
                      "snapkv its window, others half the budget)"), all},
      {app.add_option("--kv-evict-window", parsed.window,
                      "snapkv: the last queries of a prompt chunk that score the cache")
           ->capture_default_str(), {P::SnapKV}},
      {app.add_option("--kv-evict-pool", parsed.pool, "snapkv: max-pooling kernel over positions")
           ->capture_default_str(), {P::SnapKV}},
      {app.add_option("--kv-evict-alpha", parsed.alpha, "a2sf: decay of accumulated attention per query")
           ->capture_default_str(), {P::A2SF}},
      {app.add_option("--kv-evict-tau", parsed.tau, "keyformer: temperature of the Gumbel softmax")
           ->capture_default_str(), {P::Keyformer}},
      {app.add_option("--kv-evict-tau-end", parsed.tau_end,
                      "keyformer: the temperature at position --ctx, reached linearly from "
                      "--kv-evict-tau (Keyformer anneals 1 to 2; default: --kv-evict-tau throughout)"),
       {P::Keyformer}}};
}

kv::EvictOptions EvictCliOptions::resolved(int64_t n_ctx) const {
  kv::EvictOptions o = parsed;
  o.policy = kv::parse_evict_policy(policy);
  if (!o.on()) {
    if (budget_opt != nullptr && budget_opt->count() > 0) throw UsageError("--kv-budget needs --kv-evict");
    for (const auto& [opt, policies] : policy_only) {
      if (opt->count() > 0) throw UsageError(opt->get_name() + " needs --kv-evict");
    }
    return o;
  }
  for (const auto& [opt, policies] : policy_only) {
    if (opt->count() > 0 && std::find(policies.begin(), policies.end(), o.policy) == policies.end()) {
      throw UsageError(opt->get_name() + " means nothing to --kv-evict " + policy);
    }
  }
  if (budget.empty()) throw UsageError("--kv-evict " + policy + " needs --kv-budget");
  char* end = nullptr;
  const double b = std::strtod(budget.c_str(), &end);
  if (end == budget.c_str() || *end != '\0' || !(b > 0) || (b < 1 && b * n_ctx < 1) ||
      (b >= 1 && b != std::floor(b))) {
    throw UsageError("--kv-budget must be a token count or a fraction in (0, 1) of --ctx, not '" + budget + "'");
  }
  o.budget = b < 1 ? static_cast<int64_t>(std::lround(b * static_cast<double>(n_ctx))) : static_cast<int64_t>(b);
  kv::check_evict_options(o);
  return kv::resolved(o);
}

// The text as llama.cpp's -f reads it: the whole file, one trailing newline dropped.
std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot open text file " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

void add_domain_option(CLI::App& app, std::string& domain, bool routes) {
  app.add_option("--domain", domain,
                 std::string("run the model restricted to one domain's FFN neurons (a file written "
                             "by squeeze prune --domains): its name") +
                     (routes ? ", or auto: the domain the file's router picks from the prompt's "
                               "early-layer activations" : ""));
}

std::unique_ptr<model::Model> load_model(
    const std::string& path, const std::string& domain, int threads,
    const std::function<std::vector<int32_t>(const model::Model&)>& route_tokens) {
  auto dense = model::Model::load(path);
  if (domain.empty()) return dense;
  const model::HParams& hp = dense->hparams();
  const auto table = compress::read_domains(dense->file(), hp.n_layer, hp.n_embd);
  if (!table) throw UsageError(path + " has no domain masks (write them with squeeze prune --domains)");
  ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
  int64_t d = 0;
  if (domain == "auto") {
    if (!route_tokens) throw UsageError("--domain auto routes a prompt; this command takes a domain's name");
    const std::vector<int32_t> ids = route_tokens(*dense);
    if (ids.size() < 2) throw UsageError("--domain auto routes on the prompt's tokens after the first: give at least 2");
    // The first 512 tokens route (the feature is a mean; more add little but time).
    const std::span<const int32_t> head(ids.data(), std::min<size_t>(ids.size(), 512));
    double probability = 0.0;
    d = compress::route_domain(*table, compress::route_feature(*dense, head, table->route_layer, pool), &probability);
    std::fprintf(stderr, "domain: %s (auto, probability %.3f over %zu prompt tokens)\n", table->names[d].c_str(),
                 probability, head.size());
  } else {
    d = table->index(domain);
    std::fprintf(stderr, "domain: %s\n", table->names[d].c_str());
  }
  return compress::domain_model(*dense, *table, d, pool);
}

void add_prefill_options(CLI::App& app, PrefillOptions& o) {
  app.add_option("--prefill-skip", o.skip,
                 "prefill-only layer skipping (POP, docs/POP.md): layers (0-based ranges, e.g. "
                 "20-27,29) that prompt tokens but the last pass by writing their K and V only; "
                 "or auto:R, the first fraction R of the layer order calibrated by squeeze "
                 "prune-prefill. Decode runs every layer");
  CLI::Option* heads = app.add_option("--prefill-heads", o.heads,
                 "dynamic head pruning in prefill: per --head-chunk prompt positions and layer, "
                 "keep this fraction (0..1] of the query heads scoring highest by --head-score; "
                 "the others add nothing for that chunk (decode and the last prompt token run "
                 "every head)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--head-groups", o.head_groups,
               "with --prefill-heads: keep whole KV groups (a KV head and its query heads), the "
               "fraction F of the groups with the highest summed score; only a dropped group "
               "saves the attention kernel's K and V reads");
  // --head-chunk and --head-score mean nothing without head pruning: refused, not ignored.
  app.add_option("--head-chunk", o.head_chunk, "prompt positions per head-pruning decision")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->needs(heads);
  app.add_option("--head-score", o.head_score,
                 "head score: qk (query-key cosine), entropy (1 - attention entropy), vnorm "
                 "(attention-weighted |v|_1, VATP), a2sf (decayed accumulated attention), or "
                 "static (the ranking stored by squeeze heads -o: the same heads every chunk)")
      ->capture_default_str()
      ->needs(heads);
}

void enable_prefill_pruning(const model::Model& m, const PrefillOptions& o, model::Context& ctx) {
  const int64_t n_layer = m.hparams().n_layer;
  const bool fixed = o.head_score == "static";
  const ops::HeadScore score = fixed ? ops::HeadScore::VNorm : ops::parse_head_score(o.head_score);
  if (!o.skip.empty()) {
    std::vector<uint8_t> set = sparsity::parse_prefill_skip(
        o.skip, n_layer, sparsity::PrefillPlan::read(m.file(), n_layer));
    const auto k = std::count(set.begin(), set.end(), 1);
    std::fprintf(stderr, "prefill-skip: layers %s (%lld of %lld) write only K and V for prompt "
                 "tokens but the last\n", sparsity::prefill_skip_text(set).c_str(),
                 static_cast<long long>(k), static_cast<long long>(n_layer));
    ctx.set_prefill_skip(std::move(set));
  }
  if (o.head_groups && !o.heads) throw UsageError("--head-groups needs --prefill-heads");
  if (o.heads) {
    if (*o.heads <= 0) throw UsageError("--prefill-heads must be above 0");
    model::HeadPruning hp;
    hp.keep = *o.heads;
    hp.chunk = o.head_chunk;
    hp.score = score;
    hp.whole_groups = o.head_groups;
    std::string by = std::string(ops::head_score_name(score));
    if (fixed) {
      const auto r = sparsity::HeadRanking::read(m.file(), n_layer, m.hparams().n_head);
      if (r.scores.empty()) {
        throw UsageError("--head-score static needs a head ranking stored by `squeeze heads -o` "
                         "(this file has no squeeze.heads.scores)");
      }
      hp.fixed = r.scores;
      by = "the stored " + r.score + " ranking";
    }
    ctx.set_prefill_heads(std::move(hp));
    std::fprintf(stderr, "prefill-heads: %.2f of the %s per %lld prompt positions by %s\n",
                 *o.heads, o.head_groups ? "KV groups" : "heads",
                 static_cast<long long>(o.head_chunk), by.c_str());
  }
}

void add_act_sparsity_option(CLI::App& app, ActSparsityOptions& o) {
  app.add_option("--act-sparsity", o.level,
                 "zero activations below the thresholds of this level (0..0.99) of the file's "
                 "table, made by squeeze sparsify; decode then reads only the weights of the "
                 "activations kept")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--head-sparsity", o.head,
                 "with --act-sparsity on a TEAL file: also zero the output head's inputs below "
                 "the head thresholds of this level (0..0.99); the head is a fifth of a small "
                 "model's weights (default: the head stays dense, as in TEAL)")
      ->check(CLI::Range(0.0, 0.99));
}

LogLines::LogLines() : tty_(isatty(STDERR_FILENO) != 0) {}

void LogLines::operator()(const std::string& line, bool transient) {
  if (transient) {
    if (!tty_) return;
    std::fprintf(stderr, "\r%-100s", line.c_str());
    transient_shown_ = true;
    return;
  }
  if (transient_shown_) std::fputc('\r', stderr);
  std::fprintf(stderr, "%-100s\n", line.c_str());
  transient_shown_ = false;
}

CalibOptions add_calibration_options(CLI::App& app, compress::QuantizeOptions& qo,
                                     const std::string& who) {
  qo.calib_path = "../shared/data/wikitext-2/valid.txt";
  CalibOptions o;
  o.calib = app.add_option("--calib", qo.calib_path,
                           "calibration text of " + who + " (default " + qo.calib_path + ")");
  o.samples = app.add_option("--calib-samples", qo.calib_samples,
                             "calibration samples (default 128)")
                  ->check(CLI::Range(1, 1 << 20));
  o.ctx = app.add_option("--calib-ctx", qo.calib_ctx, "tokens per calibration sample (default 512)")
              ->check(CLI::Range(2, 1 << 20));
  o.seed = app.add_option("--seed", qo.seed, "calibration sampling seed (default 0)");
  return o;
}

std::optional<compress::QuantizeStats> quantize_with_progress(const std::string& model_path,
                                                              const std::string& out_path,
                                                              compress::QuantizeOptions& qo,
                                                              ThreadPool& pool) {
  qo.cancel = &stop_requested();
  LogLines log;
  qo.log = std::ref(log);
  try {
    return compress::quantize_model(model_path, out_path, qo, pool);
  } catch (const compress::Interrupted& e) {
    interrupted_exit(e, log.transient_shown());
    return std::nullopt;
  }
}

int interrupted_exit(const std::exception& e, bool tty) {
  if (tty) std::fputc('\n', stderr);
  std::cerr << "error: " << e.what() << "\n";
  return 130;
}

std::unique_ptr<model::ActSparsity> enable_act_sparsity(const model::Model& m,
                                                        const ActSparsityOptions& o,
                                                        model::Context& ctx, ThreadPool& pool) {
  if (o.head && !o.level) throw UsageError("--head-sparsity needs --act-sparsity");
  if (!o.level) return nullptr;
  auto policy = std::make_unique<model::ActSparsity>(m, *o.level, pool, o.head);
  ctx.set_act_sparsity(policy.get());
  print_act_sparsity(*policy);
  return policy;
}

void print_act_sparsity(const model::ActSparsity& policy) {
  char head[64] = "";
  if (policy.head().on) std::snprintf(head, sizeof head, ", head at level %.2f", policy.head().level);
  std::fprintf(stderr, "act-sparsity: %s at level %.2f%s, column layouts %.1f MiB%s\n",
               std::string(sparsity::method_name(policy.method())).c_str(), policy.level(), head,
               policy.bytes() / 1048576.0,
               policy.n_dense_fallback() > 0
                   ? (", " + std::to_string(policy.n_dense_fallback()) +
                      " matrices without a column layout run densely")
                         .c_str()
                   : "");
}

serve::GeneratorOptions generator_options(const ModelOptions& mo, const SamplingOptions& so) {
  serve::GeneratorOptions o;
  o.model_path = resolve_model_path(mo.model);
  o.n_ctx = mo.n_ctx;
  o.threads = mo.resolved_threads();
  o.act_sparsity = mo.act_sparsity.level;
  o.head_sparsity = mo.act_sparsity.head;
  o.kv = mo.kv.resolved();
  o.evict = mo.evict.resolved(mo.n_ctx);
  o.sampling = so.resolved();
  return o;
}

std::string density_text(const model::Model& m, const model::ActSparsity& policy,
                         const model::SparsityCounters& c) {
  std::string out;
  char buf[64];
  const int sites = sparsity::n_sites(policy.method());
  for (int s = 0; s < sites; ++s) {
    std::snprintf(buf, sizeof buf, "%s%s %.3f", s ? " " : "",
                  std::string(sparsity::site_name(policy.method(), s)).c_str(), c.density(s));
    out += buf;
  }
  if (sites > 1) {
    std::snprintf(buf, sizeof buf, " (weighted by weights %.3f)", c.weighted_density(m, policy.method()));
    out += buf;
  }
  if (policy.head().on) {
    std::snprintf(buf, sizeof buf, "; head_in %.3f", c.head_density());
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "; block weights read %.3f", c.block_read_fraction());
  out += buf;
  return out;
}

int ModelOptions::resolved_threads() const {
  return threads > 0 ? threads : ThreadPool::default_threads();
}

void SamplingOptions::add_to(CLI::App& app) {
  app.add_option("--temp", params.temp, "temperature; 0 = greedy")->capture_default_str();
  app.add_option("--top-k", params.top_k, "top-k; <= 0 disables")->capture_default_str();
  app.add_option("--top-p", params.top_p, "top-p (nucleus); 1 disables")->capture_default_str();
  app.add_option("--min-p", params.min_p, "min-p; 0 disables")->capture_default_str();
  app.add_option("--repeat-penalty", params.repeat_penalty, "repetition penalty; 1 disables")
      ->capture_default_str();
  app.add_option("--repeat-last-n", params.repeat_last_n, "tokens the penalty looks back over")
      ->capture_default_str();
  app.add_option("--seed", seed, "random seed (default: random, printed at the end)");
}

sample::SamplerParams SamplingOptions::resolved() const {
  sample::SamplerParams p = params;
  if (seed) {
    p.seed = *seed;
  } else {
    p.seed = static_cast<uint64_t>(
                 std::chrono::steady_clock::now().time_since_epoch().count()) ^
             (static_cast<uint64_t>(getpid()) << 32);
  }
  sample::validate(p);
  return p;
}

std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << " (run with --help for usage)\n";
    return 2;
  }
  return std::nullopt;
}

std::string act_sparsity_summary(const model::Model& m, const model::ActSparsity& policy,
                                 const model::SparsityCounters& c) {
  char head[64];
  std::snprintf(head, sizeof head, "act-sparsity %s %.2f: density ",
                std::string(sparsity::method_name(policy.method())).c_str(), policy.level());
  return head + density_text(m, policy, c);
}

std::string duration_text(double s) {
  char b[32];
  if (s >= 60) {
    std::snprintf(b, sizeof b, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  } else {
    std::snprintf(b, sizeof b, "%.1fs", s);
  }
  return b;
}

int guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

namespace {

// The one piece of global state: a signal handler can reach nothing else.
std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the flag is set from a signal handler");

extern "C" void request_stop(int) { g_stop_requested.store(true); }

}  // namespace

const std::atomic<bool>& stop_requested() { return g_stop_requested; }

StopOnSignal::StopOnSignal() {
  g_stop_requested.store(false);
  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopOnSignal::~StopOnSignal() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

}  // namespace squeeze::cli
