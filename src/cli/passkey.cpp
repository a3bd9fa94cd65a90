// squeeze passkey: passkey retrieval over depths x trials (eval/passkey.h) at a context size,
// with any KV storage or prefill pruning. Progress on stderr, results on stdout.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/timer.h"
#include "eval/passkey.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::cli {

int cmd_passkey(int argc, char** argv) {
  CLI::App app{"Passkey retrieval: a random 5-digit key hidden at several depths of filler text "
               "that fills --ctx; accuracy of the greedy answers.",
               "squeeze passkey"};
  ModelOptions mo;
  mo.n_ctx = 4096;
  eval::PasskeyOptions po;
  mo.add_to(app);
  mo.evict.add_to(app);
  int64_t n_batch = 256;
  app.add_option("-b,--batch", n_batch,
                 "prompt tokens per forward chunk (with --kv-evict, evictions run between chunks: "
                 "give --ctx for one eviction after the whole prompt, as SnapKV)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--depths", po.depths, "key depths, evenly from the start to the end of the text")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--trials", po.trials, "keys per depth")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("--seed", po.seed, "seed of the keys")->capture_default_str();
  app.add_option("--answer-tokens", po.n_answer, "tokens decoded for the answer")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{64}));
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    const std::vector<double> depths = eval::passkey_depths(po);
    const auto model = model::Model::load(resolve_model_path(mo.model));
    const tokenizer::Tokenizer tok(tokenizer::read_vocab(model->file()));
    ThreadPool pool(mo.resolved_threads());
    const kv::EvictOptions evict = mo.evict.resolved(mo.n_ctx);
    model::Context ctx(*model, mo.n_ctx, pool, n_batch, 1,
                       kv::evict_capacity(evict, mo.n_ctx, std::min(n_batch, mo.n_ctx), 1), mo.kv.resolved());
    ctx.set_eviction(evict);
    const auto sparsity = enable_act_sparsity(*model, mo.act_sparsity, ctx, pool);
    enable_prefill_pruning(*model, mo.prefill, ctx);
    eval::passkey_prompt(tok, 10000, 0.5, mo.n_ctx - po.n_answer);  // fits, or a clear error
    std::fprintf(stderr, "passkey: ctx %lld, %zu depths x %d trials, KV cache %s, eviction %s, %d threads\n",
                 static_cast<long long>(mo.n_ctx), depths.size(), po.trials,
                 kv::describe(ctx.kv().options()).c_str(), kv::describe(evict).c_str(), pool.size());
    std::mt19937_64 rng(po.seed);
    std::uniform_int_distribution<int> key_of(10000, 99999);
    const bool tty = isatty(STDERR_FILENO) != 0;
    int64_t right = 0, total = 0;
    const Timer timer;
    for (const double depth : depths) {
      int depth_right = 0;
      std::string answers;
      for (int t = 0; t < po.trials; ++t) {
        const eval::PasskeyTrial r = eval::run_passkey_trial(ctx, tok, key_of(rng), depth, po.n_answer);
        depth_right += r.correct;
        std::string shown;  // the answer on one line
        for (const char c : r.answer) shown += c == '\n' ? std::string("\\n") : std::string(1, c);
        answers += (answers.empty() ? "" : " | ") + std::to_string(r.key) + (r.correct ? " ok:" : " wrong:") + shown;
        ++total;
        if (tty) {
          std::fprintf(stderr, "\r[%lld/%lld] %s", static_cast<long long>(total),
                       static_cast<long long>(depths.size()) * po.trials,
                       duration_text(timer.seconds()).c_str());
        }
      }
      if (tty) std::fputc('\n', stderr);
      right += depth_right;
      std::printf("depth %.2f: %d/%d  (%s)\n", depth, depth_right, po.trials, answers.c_str());
      std::fflush(stdout);
    }
    std::printf("passkey accuracy %.1f%% (%lld/%lld) at ctx %lld, KV cache %s, eviction %s; %.1f s\n",
                100.0 * static_cast<double>(right) / static_cast<double>(total),
                static_cast<long long>(right), static_cast<long long>(total),
                static_cast<long long>(mo.n_ctx), kv::describe(ctx.kv().options()).c_str(),
                kv::describe(evict).c_str(), timer.seconds());
    return 0;
  });
}

}  // namespace squeeze::cli
