// squeeze perplexity: llama-perplexity's protocol on a text file (eval/perplexity.h); saves the
// base model's distribution (--save-logits) or compares with a saved one (--kl-divergence).
// Progress on stderr, results on stdout.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/timer.h"
#include "eval/perplexity.h"
#include "model/context.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::cli {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;  // set by SIGINT; checked between chunks
extern "C" void on_sigint(int) { g_interrupted = 1; }

// Ctrl-C stops the run at the next chunk boundary (a second Ctrl-C kills at once).
struct SigintGuard {
  struct sigaction old {};
  SigintGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
  }
  ~SigintGuard() { sigaction(SIGINT, &old, nullptr); }
};

void print_kld(const eval::KldReport& r) {
  auto line = [](const char* name, const eval::Estimate& e, double scale, const char* unit) {
    std::printf("%-18s %10.6f +/- %.6f%s\n", name, scale * e.value, scale * e.error, unit);
  };
  line("PPL(model)", r.ppl, 1, "");
  line("PPL(base)", r.ppl_base, 1, "");
  line("PPL ratio", r.ppl_ratio, 1, "");
  line("Mean KLD", r.kld, 1, "");
  std::printf("%-18s %10.6f\n%-18s %10.6f\n%-18s %10.6f\n%-18s %10.6f\n%-18s %10.6f\n",
              "Median KLD", r.kld_median, "90.0% KLD", r.kld_p90, "99.0% KLD", r.kld_p99,
              "99.9% KLD", r.kld_p999, "Maximum KLD", r.kld_max);
  line("Same top-1", r.top1, 100, " %");
  line("RMS dp (correct)", r.rms_p_diff, 100, " %");
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  CLI::App app{"Perplexity of a model on a text with llama-perplexity's protocol; KL divergence\n"
               "and top-1 agreement against a base model's saved logits.",
               "squeeze perplexity"};
  ModelOptions mo;
  mo.n_ctx = 512;
  std::string text_path, save_path, kld_path;
  int64_t n_chunks = -1;
  int64_t n_batch = 0;
  bool prefill_split = false;
  mo.add_to(app);
  mo.evict.add_to(app);
  std::string domain;
  add_domain_option(app, domain, /*routes=*/false);
  app.add_flag("--prefill-split", prefill_split,
               "POP's protocol, with --prefill-skip or --prefill-heads: each chunk's first half (up to the first "
               "scored position) is the prompt, prefilled with the skip set; the rest runs "
               "every layer through the KV cache that prefill left and is scored as usual");
  app.add_option("-f,--file", text_path, "text file to evaluate")->required();
  app.add_option("--chunks", n_chunks, "evaluate at most N chunks of --ctx tokens (default: all)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("-b,--batch", n_batch, "tokens per forward call (default: --ctx)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  auto* save = app.add_option("--save-logits", save_path,
                              "save the model's output distribution on the text to FILE");
  app.add_option("--kl-divergence", kld_path,
                 "compare with a base model's distribution saved by --save-logits in FILE")
      ->excludes(save);
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    const Timer wall;
    const std::string text = read_text(text_path);
    std::optional<eval::LogitsReader> base;
    if (!kld_path.empty()) base.emplace(kld_path);
    auto model = load_model(resolve_model_path(mo.model), domain, mo.resolved_threads());
    tokenizer::Tokenizer tok(tokenizer::read_vocab(model->file()));
    if (tok.vocab().add_eos) {
      throw UsageError("the vocabulary adds EOS to every text; llama-perplexity's protocol "
                       "does not apply");
    }
    ThreadPool pool(mo.resolved_threads());
    const kv::EvictOptions evict = mo.evict.resolved(mo.n_ctx);
    const int64_t chunk = n_batch > 0 ? std::min(n_batch, mo.n_ctx) : mo.n_ctx;
    if (evict.on() && chunk >= mo.n_ctx) {
      throw UsageError("perplexity with --kv-evict needs -b below --ctx: eviction runs between "
                       "forward chunks");
    }
    model::Context ctx(*model, mo.n_ctx, pool, chunk, 1, kv::evict_capacity(evict, mo.n_ctx, chunk, 1),
                       mo.kv.resolved());
    ctx.set_eviction(evict);
    const auto sparsity = enable_act_sparsity(*model, mo.act_sparsity, ctx, pool);
    if (prefill_split != mo.prefill.any()) {
      throw UsageError(prefill_split ? "--prefill-split needs --prefill-skip or --prefill-heads"
                                     : "perplexity with --prefill-skip or --prefill-heads needs "
                                       "--prefill-split (the pruned prompt is each chunk's "
                                       "first half)");
    }
    enable_prefill_pruning(*model, mo.prefill, ctx);

    const Timer tok_timer;
    const std::vector<int32_t> tokens =
        tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
    const double tok_seconds = tok_timer.seconds();
    const int64_t max_chunks = base ? std::min<int64_t>(n_chunks < 0 ? INT64_MAX : n_chunks,
                                                        base->header().n_chunks)
                                    : n_chunks;
    const eval::ChunkPlan plan = eval::plan_chunks(static_cast<int64_t>(tokens.size()),
                                                   mo.n_ctx, max_chunks);
    eval::LogitsHeader header = eval::run_header(tok.vocab(), tokens, plan);
    if (base) base->check_matches(header);
    std::optional<eval::LogitsWriter> writer;
    if (!save_path.empty()) writer.emplace(save_path, header);

    std::fprintf(stderr, "%zu tokens (tokenized in %.2f s); %lld chunks of %lld, scoring %lld "
                 "positions each; %d threads\n", tokens.size(), tok_seconds,
                 static_cast<long long>(plan.n_chunks), static_cast<long long>(plan.n_ctx),
                 static_cast<long long>(plan.n_scored()), pool.size());
    const bool tty = isatty(STDERR_FILENO) != 0;
    const Timer eval_timer;
    eval::PerplexityOptions opt;
    opt.save = writer ? &*writer : nullptr;
    opt.base = base ? &*base : nullptr;
    opt.interrupted = [] { return g_interrupted != 0; };
    opt.progress = [&](int64_t done, int64_t total, double ppl, double kld, double top1) {
      const double per = eval_timer.seconds() / static_cast<double>(done);
      std::fprintf(stderr, "%s[%lld/%lld] %.4f", tty ? "\r" : "", static_cast<long long>(done),
                   static_cast<long long>(total), ppl);
      if (base) std::fprintf(stderr, "  KLD %.6f  top-1 %.2f%%", kld, 100 * top1);
      std::fprintf(stderr, "  (%.2f s/chunk, ETA %s)%s", per,
                   duration_text(per * static_cast<double>(total - done)).c_str(),
                   tty ? "   " : "\n");
      if (tty && done == total) std::fputc('\n', stderr);
    };
    g_interrupted = 0;
    const SigintGuard sigint;
    eval::PerplexityResult r;
    try {
      r = eval::run_perplexity(ctx, pool, tokens, tok.vocab().add_bos ? tok.bos() : -1, plan, opt);
    } catch (const Error&) {
      if (tty) std::fputc('\n', stderr);
      if (g_interrupted && writer) throw Error("interrupted; " + save_path + " not written");
      throw;
    }
    if (writer) writer->commit();

    if (r.kld) {
      print_kld(*r.kld);
      if (prefill_split) {
        std::printf("%-18s %10.3f %%  (the first scored position of each chunk: the token "
                    "after the prompt)\n", "First-token top-1",
                    100.0 * static_cast<double>(r.first_same_top) /
                        static_cast<double>(plan.n_chunks));
      }
    } else {
      std::printf("PPL = %.4f +/- %.5f\n", r.nll.ppl(), r.nll.ppl_error());
    }
    const double scored_per_s = static_cast<double>(plan.n_chunks * plan.n_ctx) / r.seconds;
    std::printf("%lld chunks x %lld tokens, %lld scored; evaluation %.1f s (%.1f tokens/s), "
                "wall time %.1f s\n", static_cast<long long>(plan.n_chunks),
                static_cast<long long>(plan.n_ctx), static_cast<long long>(r.nll.count),
                r.seconds, scored_per_s, wall.seconds());
    if (writer) std::printf("saved logits to %s\n", save_path.c_str());
    if (ctx.kv().options().quantized()) {
      const auto& kv = ctx.kv();
      std::printf("KV cache %s: %.1f bytes per token in codes (f16: %lld), %.2f MiB at the end "
                  "(%lld blocks of %lld tokens in f16)\n",
                  kv::describe(kv.options()).c_str(), static_cast<double>(kv.bytes_per_token()),
                  static_cast<long long>(2 * kv.n_layer() * kv.row() * 2), kv.bytes() / 1048576.0,
                  static_cast<long long>(kv.n_hot_blocks()), static_cast<long long>(kv.block_tokens()));
    }
    if (evict.on()) {
      std::printf("KV eviction %s: %lld tokens evicted, %lld KV cells of room (%.2f MiB)\n",
                  kv::describe(evict).c_str(), static_cast<long long>(ctx.n_evicted()),
                  static_cast<long long>(ctx.kv().capacity()), ctx.kv().bytes() / 1048576.0);
    }
    if (sparsity) {
      std::printf("%s\n", act_sparsity_summary(*model, *sparsity, ctx.sparsity_counters()).c_str());
    }
    return 0;
  });
}

}  // namespace squeeze::cli
