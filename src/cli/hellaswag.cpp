// squeeze hellaswag: HellaSwag accuracy with llama-perplexity --hellaswag's protocol
// (eval/hellaswag.h). Per task the running accuracy and its 95% interval on stdout, as
// llama-perplexity prints them; the final accuracy and standard error; progress on stderr;
// --per-task writes each task's gold and chosen endings and four scores.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/timer.h"
#include "eval/hellaswag.h"
#include "model/context.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kDefaultTaskFile = "shared/data/hellaswag/hellaswag_val_full.txt";

// -f if given; else ../shared/data/hellaswag/... from the working directory (the repository
// root), else shared/data/... in a folder above the binary.
std::string resolve_task_file(const std::string& given) {
  if (!given.empty()) return given;
  if (auto p = find_default_file(fs::current_path().parent_path() / kDefaultTaskFile,
                                 kDefaultTaskFile)) {
    return *p;
  }
  throw UsageError(std::string("no task file given (-f) and ../") + kDefaultTaskFile +
                   " was not found from the working directory or the binary");
}

// The per-task table, through an AtomicFile: renamed into place once complete.
class PerTaskWriter {
 public:
  // A path that cannot be written is the user's --per-task: a UsageError.
  explicit PerTaskWriter(const std::string& path) try : file_(path) {
    file_.write("# order\ttask\tgold\tchosen\tcorrect\tscore0\tscore1\tscore2\tscore3\n");
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  void add(int64_t order, const eval::HellaswagTaskResult& r) {
    char b[256];
    const auto& lp = r.score.log_prob;
    const int n = std::snprintf(b, sizeof b, "%lld\t%zu\t%d\t%d\t%d\t%.9f\t%.9f\t%.9f\t%.9f\n",
                                static_cast<long long>(order), r.task, r.gold, r.score.chosen,
                                r.correct() ? 1 : 0, lp[0], lp[1], lp[2], lp[3]);
    file_.write(b, std::min(static_cast<size_t>(n), sizeof b - 1));
  }
  void commit() { file_.commit(); }

 private:
  AtomicFile file_;
};

}  // namespace

int cmd_hellaswag(int argc, char** argv) {
  CLI::App app{"HellaSwag accuracy with llama-perplexity --hellaswag's scoring: each ending's\n"
               "mean token log-probability after the four sequences' common prefix; tasks drawn\n"
               "at random as llama-perplexity draws them (mt19937 seeded with 1) or in file order.",
               "squeeze hellaswag"};
  ModelOptions mo;
  mo.n_ctx = 512;
  std::string task_path, per_task_path;
  int64_t n_tasks = 400;
  std::string order_name = "random";
  mo.add_to(app);
  app.add_option("-f,--file", task_path,
                 "task file, 6 lines a task (default: ../shared/data/hellaswag/"
                 "hellaswag_val_full.txt)");
  app.add_option("--tasks", n_tasks, "number of tasks (at most the file's)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--task-order", order_name,
                 "random: llama-perplexity's draw; file: the first N in file order")
      ->capture_default_str()
      ->check(CLI::IsMember({"random", "file"}));
  app.add_option("--per-task", per_task_path,
                 "write a TSV of every task (run order, file index, gold, chosen, correct, the "
                 "four scores) to FILE");
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    const Timer wall;
    const std::string path = resolve_task_file(task_path);
    const std::vector<eval::HellaswagTask> tasks = eval::read_hellaswag(path);
    if (n_tasks > static_cast<int64_t>(tasks.size())) {
      std::fprintf(stderr, "the file holds %zu tasks; running all of them\n", tasks.size());
    }
    const size_t n = std::min<size_t>(static_cast<size_t>(n_tasks), tasks.size());
    const eval::TaskOrder order =
        order_name == "file" ? eval::TaskOrder::File : eval::TaskOrder::Random;
    const std::vector<size_t> picked = eval::hellaswag_task_order(tasks.size(), n, order);
    std::optional<PerTaskWriter> per_task;
    if (!per_task_path.empty()) per_task.emplace(per_task_path);

    auto model = model::Model::load(resolve_model_path(mo.model));
    tokenizer::Tokenizer tok(tokenizer::read_vocab(model->file()));
    const Timer tok_timer;
    std::vector<eval::HellaswagTokens> tokens(n);
    size_t longest = 0;
    for (size_t i = 0; i < n; ++i) {
      tokens[i] = eval::tokenize_task(tok, tasks[picked[i]]);
      if (static_cast<int64_t>(tokens[i].longest()) > mo.n_ctx) {
        throw UsageError("task " + std::to_string(picked[i]) + " needs " +
                         std::to_string(tokens[i].longest()) + " tokens of context; --ctx is " +
                         std::to_string(mo.n_ctx));
      }
      longest = std::max(longest, tokens[i].longest());
    }
    const double tok_seconds = tok_timer.seconds();
    ThreadPool pool(mo.resolved_threads());
    // The KV cache holds the longest sequence; --ctx bounds it (llama-perplexity's window).
    const auto n_kv = static_cast<int64_t>(longest);
    model::Context ctx(*model, n_kv, pool, n_kv, 1, 0, mo.kv.resolved());
    const auto sparsity = enable_act_sparsity(*model, mo.act_sparsity, ctx, pool);
    enable_prefill_pruning(*model, mo.prefill, ctx);

    std::fprintf(stderr, "%s: %zu tasks, %zu %s; tokenized in %.2f s (longest sequence %zu "
                 "tokens); %d threads\n", path.c_str(), tasks.size(), n,
                 order == eval::TaskOrder::Random ? "drawn at random (mt19937 seed 1)"
                                                  : "in file order",
                 tok_seconds, longest, pool.size());
    std::printf("\ntask\tacc_norm\t95%% confidence interval\n");
    const bool tty = isatty(STDERR_FILENO) != 0;
    const Timer eval_timer;
    eval::HellaswagOptions opt;
    opt.interrupted = [] { return stop_requested().load(); };
    opt.on_task = [&](int64_t done, int64_t total, const eval::HellaswagTaskResult& r,
                      const eval::AccuracyStats& acc) {
      // llama-perplexity's line: tasks done, running accuracy, Wilson 95% interval.
      std::printf("%lld\t%3.8lf%%\t[%3.4lf%%, %3.4lf%%]\n", static_cast<long long>(done),
                  acc.acc() * 100.0, acc.wilson_low() * 100.0, acc.wilson_high() * 100.0);
      if (per_task) per_task->add(done, r);
      if (tty || done % 100 == 0 || done == total) {
        const double per = eval_timer.seconds() / static_cast<double>(done);
        std::fprintf(stderr, "%s[%lld/%lld] acc %.2f%%  (%.3f s/task, ETA %s)%s",
                     tty ? "\r" : "", static_cast<long long>(done),
                     static_cast<long long>(total), 100 * acc.acc(), per,
                     duration_text(per * static_cast<double>(total - done)).c_str(),
                     tty ? "   " : "\n");
        if (tty && done == total) std::fputc('\n', stderr);
      }
    };
    const StopOnSignal stop_on_signal;
    eval::HellaswagResult r;
    try {
      r = eval::run_hellaswag(ctx, pool, tasks, picked, tokens, opt);
    } catch (const Error&) {
      if (tty) std::fputc('\n', stderr);
      throw;
    }
    if (per_task) per_task->commit();

    std::printf("\nFinal result: %.4f +/- %.4f (%lld tasks, %lld correct)\n",
                100 * r.acc.acc(), 100 * r.acc.std_error(), static_cast<long long>(r.acc.n),
                static_cast<long long>(r.acc.n_correct));
    std::printf("%lld tokens evaluated in %.1f s (%.1f tokens/s), wall time %.1f s\n",
                static_cast<long long>(r.n_tokens), r.seconds,
                static_cast<double>(r.n_tokens) / r.seconds, wall.seconds());
    if (per_task) std::printf("per-task results in %s\n", per_task_path.c_str());
    if (sparsity) {
      std::printf("%s\n", act_sparsity_summary(*model, *sparsity, ctx.sparsity_counters()).c_str());
    }
    return 0;
  });
}

}  // namespace squeeze::cli
