// HellaSwag accuracy with llama.cpp's `llama-perplexity --hellaswag` protocol (hellaswag_score in
// its tools/perplexity/perplexity.cpp, llama-cpp-python 0.3.36's vendored copy):
//   * the task file holds 6 lines a task: context, the index 0-3 of the gold ending, the four
//     endings (lines split at '\n' as std::getline does; the count must be a multiple of 6);
//   * tasks are drawn at random as llama-perplexity draws them: std::mt19937 seeded with 1, one
//     index uniform over the tasks left (libstdc++'s uniform_int_distribution<size_t>), the
//     drawn task removed; or, with TaskOrder::File, the first N in file order;
//   * each sequence is context + " " + ending, tokenized with the vocabulary's BOS/EOS flags and
//     special-token texts not parsed;
//   * the score of an ending is the mean log-probability of its tokens after the common prefix
//     of the four sequences: the first from the prefix's last logits (llama's softmax(): float
//     exp, double sum, float probability, float log), the others from the ending's own logits
//     (llama's compute_logprobs: float exp, float sum, float log); the chosen ending is the
//     first with the highest score;
//   * the common prefix runs once; each ending then runs from it (Context::truncate), its last
//     token not evaluated (it predicts nothing scored).
// Accuracy's standard error is llama.cpp's (winogrande / multiple-choice): sqrt(p(1-p)/(n-1));
// the running 95% interval per task is llama's Wilson score interval.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "model/context.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::eval {

struct HellaswagTask {
  std::string context;
  int gold = 0;  // 0..3
  std::array<std::string, 4> endings;
};

// Parses the 6-lines-a-task layout. Throws UsageError naming the line when the line count is
// not a multiple of 6 or a gold line is not one of 0, 1, 2, 3; and when there is no task.
std::vector<HellaswagTask> parse_hellaswag(std::string_view text);
// Reads and parses a file; throws UsageError when it cannot be opened.
std::vector<HellaswagTask> read_hellaswag(const std::string& path);

// One draw of libstdc++'s std::uniform_int_distribution<size_t>(0, range - 1) from a 32-bit
// engine (Lemire's nearly divisionless method, as GCC 11+ implements it), written out so the
// order does not depend on the standard library squeeze is built with. range in 1..2^32.
uint32_t draw_below(std::mt19937& rng, uint64_t range);

enum class TaskOrder { Random, File };

// The file indices of the first n tasks in llama-perplexity's order (n <= n_tasks).
std::vector<size_t> hellaswag_task_order(size_t n_tasks, size_t n, TaskOrder order);

// The four token sequences of a task and their common prefix. The prefix is capped so that
// every ending keeps at least one token (llama.cpp reads past a sequence in that case).
struct HellaswagTokens {
  std::array<std::vector<int32_t>, 4> seq;
  size_t common_prefix = 0;
  size_t longest() const;
  // Tokens the model runs for the task: the prefix once, then each ending but its last token.
  size_t n_evaluated() const;
};

// Throws UsageError when the four sequences share no token (no BOS and different first tokens).
HellaswagTokens tokenize_task(const tokenizer::Tokenizer& tok, const HellaswagTask& task);

// log p(target) from one row of logits, as llama's softmax() (the first token of each ending).
double first_token_log_prob(const float* logits, int64_t n_vocab, int32_t target);
// log p(target) from one row of logits, as llama's compute_logprobs (the other tokens).
float token_log_prob(const float* logits, int64_t n_vocab, int32_t target);

struct HellaswagScore {
  std::array<double, 4> log_prob{};  // mean log-probability of each ending's tokens
  int chosen = 0;                    // first index of the highest
};

// Scores one task on `ctx` (reset first; it must hold the longest sequence). The pool
// parallelises the per-row log-softmax.
HellaswagScore score_task(model::Context& ctx, ThreadPool& pool, const HellaswagTokens& t);

struct HellaswagTaskResult {
  size_t task = 0;  // index in the file
  int gold = 0;
  HellaswagScore score;
  bool correct() const { return score.chosen == gold; }
};

// Running accuracy after n tasks, with llama's Wilson score interval (95%) and standard error.
struct AccuracyStats {
  int64_t n = 0, n_correct = 0;
  double acc() const { return n ? static_cast<double>(n_correct) / static_cast<double>(n) : 0.0; }
  double std_error() const;  // sqrt(p(1-p)/(n-1)), 0 for n < 2
  double wilson_low() const;
  double wilson_high() const;
};

struct HellaswagOptions {
  // After each task: tasks done, total, that task's result, the running accuracy.
  std::function<void(int64_t done, int64_t total, const HellaswagTaskResult&,
                     const AccuracyStats&)> on_task;
  // Checked between tasks; when it returns true the run throws Error("interrupted ...").
  std::function<bool()> interrupted;
};

struct HellaswagResult {
  AccuracyStats acc;
  std::vector<HellaswagTaskResult> tasks;  // in run order
  int64_t n_tokens = 0;                    // tokens the model ran
  double seconds = 0.0;                    // scoring (tokenization excluded)
};

// Scores the tasks of `tokens` (tokenize_task of tasks[order[i]]) in order on ctx.
HellaswagResult run_hellaswag(model::Context& ctx, ThreadPool& pool,
                              const std::vector<HellaswagTask>& tasks,
                              const std::vector<size_t>& order,
                              const std::vector<HellaswagTokens>& tokens,
                              const HellaswagOptions& options = {});

}  // namespace squeeze::eval
