// squeeze bench: pp and tg speed like llama-bench, with achieved GB/s and GFLOP/s against the
// machine's measured limits; `--machine` measures those limits (eval/machine.h).
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/cpu.h"
#include "core/error.h"
#include "eval/bench.h"
#include "eval/machine.h"
#include "model/context.h"

namespace squeeze::cli {

namespace {

int run_machine_probe(int threads, const std::string& file, size_t probe_mib, bool quick,
                      bool as_json) {
  eval::ProbeOptions opt;
  opt.buffer_bytes = probe_mib << 20;
  if (quick) {  // rough figures in a fraction of the time (tests)
    opt.passes = 1;
    opt.fma_iters >>= 6;
  }
  const eval::MachineLimits m = eval::measure_machine(threads, active_isa(), opt);
  eval::write_machine_file(file, m);
  if (as_json) {
    std::cout << eval::machine_to_json(m) << "\n";
  } else {
    std::cout << eval::machine_to_text(m) << "saved to " << file << "\n";
  }
  return 0;
}

// --roof-gbs/--roof-gflops when given (either may be left out: no fraction for that test
// kind); else the cached probe results for this ISA and thread count, with the prefill roof of
// the model's main weight format (eval::prefill_roof); else none.
void check_roof_flags(std::optional<double> gbs, std::optional<double> gflops) {
  for (const auto& [name, v] : {std::pair{"--roof-gbs", gbs}, std::pair{"--roof-gflops", gflops}}) {
    if (v && !(*v > 0)) throw UsageError(std::string(name) + " must be a positive number");
  }
}

std::optional<eval::Roof> find_roof(std::optional<double> gbs, std::optional<double> gflops,
                                    const std::string& file, int threads, formats::DType weights) {
  if (gbs || gflops) {
    return eval::Roof{gbs.value_or(0), gflops.value_or(0), "--roof-gflops", gflops.value_or(0),
                      "--roof-gbs/--roof-gflops"};
  }
  if (auto t = eval::cached_limits(file, active_isa(), threads)) {
    const eval::PrefillRoof p = eval::prefill_roof(*t, weights, active_isa());
    return eval::Roof{t->read_gb_per_s, t->fma_gflop_per_s, p.name, p.gop_per_s, file};
  }
  return std::nullopt;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Prompt-processing and generation speed, in the manner of llama-bench: pp decodes "
               "-p random tokens from an empty context in one call, tg decodes -n tokens one at "
               "a time; tokens/s mean ± sd over -r repetitions after a warm-up.",
               "squeeze bench"};
  std::string model_path;
  int threads = 0;
  eval::BenchOptions bo;
  int64_t n_batch = 512;
  bool no_warmup = false, as_json = false, machine = false, quick = false;
  std::string machine_file;
  size_t probe_mib = 512;
  std::optional<double> roof_gbs, roof_gflops;
  std::string domain;
  add_domain_option(app, domain, /*routes=*/false);
  app.add_option("-m,--model", model_path, "GGUF model file (default: models/" +
                                               std::string(kDefaultModelFile) + ")");
  app.add_option("-t,--threads", threads, "threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  app.add_option("-p,--n-prompt", bo.n_prompt, "prompt tokens, one pp test each (e.g. 128,512); "
                                                "0 = no pp test")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("-n,--n-gen", bo.n_gen, "generated tokens, one tg test each; 0 = no tg test")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--parallel", bo.parallel,
                 "sequences decoding at once in tg, one token each per step in one batch "
                 "(as llama-batched-bench); one tg test per -n and value (e.g. 1,8); t/s counts "
                 "the tokens of all of them")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("-d,--n-depth", bo.depth,
                 "tokens already in the KV cache before each test (e.g. 0,4096,8192): one test "
                 "per -p / -n and value")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("-r,--repetitions", bo.reps, "timed repetitions per test")->capture_default_str();
  app.add_option("-b,--batch", n_batch, "tokens per forward chunk in pp")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--seed", bo.seed, "seed of the random token ids")->capture_default_str();
  ActSparsityOptions act_sparsity;
  add_act_sparsity_option(app, act_sparsity);
  PrefillOptions prefill;
  add_prefill_options(app, prefill);
  KvCacheOptions kv_cache;
  kv_cache.add_to(app);
  app.add_flag("--no-warmup", no_warmup, "skip the warm-up run before each test");
  app.add_flag("--json", as_json, "print one JSON object (fields: docs/BENCHMARKS.md)");
  app.add_flag("--machine", machine,
               "measure this machine's read bandwidth and compute roofs (FP32 FMA; on the avx512 "
               "and amx tiers also 512-bit FMA and int8 VNNI; on amx the int8 and bf16 tiles) "
               "for 1 and --threads threads, print them and save them to --machine-file");
  app.add_option("--machine-file", machine_file,
                 "machine limits cache (default: ~/.cache/squeeze/machine.json)");
  app.add_option("--probe-mib", probe_mib, "read-probe buffer in MiB (much larger than the caches)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_flag("--probe-quick", quick, "one pass and 1/64 of the FMA work: rough, fast (tests)");
  app.add_option("--roof-gbs", roof_gbs, "read bandwidth roof in GB/s (instead of the cache)");
  app.add_option("--roof-gflops", roof_gflops,
                 "prefill compute roof in G(FL)OP/s (instead of the cache)");
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    const int n_threads = threads > 0 ? threads : ThreadPool::default_threads();
    if (machine_file.empty()) machine_file = eval::default_machine_file();
    if (machine && !domain.empty()) throw UsageError("--domain needs a model; --machine measures none");
    if (machine) return run_machine_probe(n_threads, machine_file, probe_mib, quick, as_json);

    bo.warmup = !no_warmup;
    const std::vector<eval::BenchTest> tests = eval::bench_tests(bo);
    check_roof_flags(roof_gbs, roof_gflops);
    const std::string path = resolve_model_path(model_path);
    auto model = load_model(path, domain, n_threads);
    const int64_t n_ctx = eval::bench_ctx_size(tests);
    const int64_t n_ctx_train = model->hparams().n_ctx_train;
    if (n_ctx > n_ctx_train) {
      throw UsageError("a test of " + std::to_string(n_ctx) + " tokens exceeds the model's " +
                       "context of " + std::to_string(n_ctx_train) + " tokens");
    }
    ThreadPool pool(n_threads);
    model::Context ctx(*model, n_ctx, pool, n_batch, eval::bench_n_seq(tests), 0, kv_cache.resolved());
    const auto sparsity = enable_act_sparsity(*model, act_sparsity, ctx, pool);
    enable_prefill_pruning(*model, prefill, ctx);
    eval::BenchReport rep =
        eval::make_report(*model, path, pool.size(), std::min(n_batch, n_ctx), n_ctx, bo.reps);
    rep.roof = find_roof(roof_gbs, roof_gflops, machine_file, n_threads, rep.weights_format);
    for (const eval::BenchTest& t : tests) {
      if (!as_json) std::cerr << "running " << t.name() << " ...\n";
      rep.results.push_back(eval::run_bench(ctx, t, bo.reps, bo.warmup, bo.seed));
    }
    if (sparsity) {
      std::cerr << "act-sparsity density over all tests: "
                << density_text(*model, *sparsity, ctx.sparsity_counters()) << "\n";
    }
    std::cout << (as_json ? eval::report_json(rep) : eval::report_text(rep)) << std::flush;
    if (as_json) std::cout << "\n";
    return 0;
  });
}

}  // namespace squeeze::cli
