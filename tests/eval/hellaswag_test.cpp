// HellaSwag (eval/hellaswag.h): the task file's layout and its malformed variants;
// llama-perplexity's random task order (indices computed with its own selection code); the
// common-prefix scoring on the tiny random model against full forward passes of each sequence;
// the accuracy statistics; and, with the real model and data, the first tasks' outcome.
#include "eval/hellaswag.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "random.h"
#include "require_file.h"
#include "temp_dir.h"
#include "tiny_model.h"

namespace squeeze::eval {
namespace {

namespace fs = std::filesystem;

std::string task_text(const std::string& ctx, const std::string& gold,
                      const std::array<std::string, 4>& e) {
  return ctx + "\n" + gold + "\n" + e[0] + "\n" + e[1] + "\n" + e[2] + "\n" + e[3] + "\n";
}

TEST(HellaswagParse, SixLinesATask) {
  const std::string text = task_text("Cooking: a man cuts", "2", {"a", "b b", "c", ""}) +
                           task_text("Sports: she runs", "0", {"w", "x", "y", "z"});
  const auto tasks = parse_hellaswag(text);
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].context, "Cooking: a man cuts");
  EXPECT_EQ(tasks[0].gold, 2);
  EXPECT_EQ(tasks[0].endings[1], "b b");
  EXPECT_EQ(tasks[0].endings[3], "");  // an empty line is an (empty) ending
  EXPECT_EQ(tasks[1].gold, 0);
  EXPECT_EQ(tasks[1].endings[3], "z");
  // Without the final newline the last line still counts (std::getline).
  const auto no_nl = parse_hellaswag(text.substr(0, text.size() - 1));
  ASSERT_EQ(no_nl.size(), 2u);
  EXPECT_EQ(no_nl[1].endings[3], "z");
}

void expect_usage_error(const std::string& text, const std::string& needle) {
  try {
    parse_hellaswag(text);
    ADD_FAILURE() << "no error for: " << text;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(HellaswagParse, MalformedFilesAreUsageErrors) {
  const std::string one = task_text("c", "1", {"a", "b", "c", "d"});
  expect_usage_error("", "no task");
  expect_usage_error(one + "extra\n", "7 lines, not a multiple of 6");
  expect_usage_error(one.substr(0, one.rfind("d\n")), "5 lines");
  expect_usage_error(one + task_text("c", "4", {"a", "b", "c", "d"}), "line 8");
  expect_usage_error(task_text("c", "x", {"a", "b", "c", "d"}), "'x', not 0, 1, 2 or 3");
  expect_usage_error(task_text("c", "12", {"a", "b", "c", "d"}), "'12'");
  expect_usage_error(task_text("c", "", {"a", "b", "c", "d"}), "task 0's gold");
  EXPECT_THROW(read_hellaswag("/nonexistent/hellaswag.txt"), UsageError);
}

TEST(HellaswagOrder, FileOrderIsTheFirstN) {
  EXPECT_EQ(hellaswag_task_order(10, 3, TaskOrder::File), (std::vector<size_t>{0, 1, 2}));
  EXPECT_THROW(hellaswag_task_order(2, 3, TaskOrder::Random), UsageError);
}

// Indices printed by llama-perplexity's own selection code (hellaswag_score: std::mt19937 rng(1),
// uniform_int_distribution<size_t>(0, prompt_lines.size()/6 - 1), erase), compiled with g++ 12.
TEST(HellaswagOrder, RandomOrderIsLlamaPerplexitys) {
  const auto full = hellaswag_task_order(10042, 10042, TaskOrder::Random);
  const std::vector<size_t> first10 = {4187, 10013, 7233, 9363, 1, 1286, 3036, 10032, 1474, 2371};
  EXPECT_EQ(std::vector<size_t>(full.begin(), full.begin() + 10), first10);
  EXPECT_EQ(full[997], 6438u);
  EXPECT_EQ(full[998], 2297u);
  EXPECT_EQ(full[999], 1293u);
  EXPECT_EQ(full[10040], 6393u);
  EXPECT_EQ(full[10041], 7789u);
  // A prefix of the order is the order of fewer tasks.
  EXPECT_EQ(hellaswag_task_order(10042, 1000, TaskOrder::Random),
            std::vector<size_t>(full.begin(), full.begin() + 1000));
  // Every task once.
  std::vector<size_t> sorted = full;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(hellaswag_task_order(5, 5, TaskOrder::Random), (std::vector<size_t>{2, 4, 3, 1, 0}));
}

#if defined(__GLIBCXX__)
// draw_below writes out libstdc++'s uniform_int_distribution<size_t> on a 32-bit engine.
TEST(HellaswagOrder, DrawBelowIsLibstdcxxUniformIntDistribution) {
  std::mt19937 a(7), b(7);
  for (uint64_t range : {1ull, 2ull, 3ull, 5ull, 10042ull, 65537ull, 3000000019ull, 4294967295ull}) {
    std::uniform_int_distribution<size_t> dist(0, range - 1);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(draw_below(a, range), dist(b)) << range;
  }
}
#endif

struct Tiny {
  std::unique_ptr<model::Model> model;
  Tiny() {
    const fs::path p = testing::temp_path("hellaswag_tiny.gguf");
    testing::TinyModelSpec spec;
    spec.tied_output = false;  // tied random embeddings make every model predict its input
    testing::write_tiny_model(p.string(), spec);
    model = model::Model::load(p.string());
  }
  int64_t n_vocab() const { return model->hparams().n_vocab; }
};

// log p of every vocabulary entry from one row, in double, from the definition.
double log_prob(const float* logits, int64_t n, int32_t target) {
  double mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max<double>(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(logits[i] - mx);
  return logits[target] - mx - std::log(sum);
}

// Mean log p of seq[from..] from one full forward pass of the whole sequence: log-softmax in
// double from the definition, or (llama_precision) with llama's float functions, whose results
// equal score_task's exactly when the logits are the same bits.
double direct_score(const model::Model& m, const std::vector<int32_t>& seq, size_t from,
                    bool llama_precision = false) {
  ThreadPool pool(1);
  model::Context ctx(m, static_cast<int64_t>(seq.size()), pool);
  const auto logits = ctx.decode(seq, /*all_logits=*/true);
  const int64_t n_vocab = m.hparams().n_vocab;
  double sum = 0;
  for (size_t k = from; k < seq.size(); ++k) {
    const float* row = logits.data() + (k - 1) * n_vocab;
    if (!llama_precision) {
      sum += log_prob(row, n_vocab, seq[k]);
    } else if (k == from) {
      sum += first_token_log_prob(row, n_vocab, seq[k]);
    } else {
      sum += token_log_prob(row, n_vocab, seq[k]);
    }
  }
  return sum / static_cast<double>(seq.size() - from);
}

HellaswagTokens random_task(int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, n_vocab - 4);  // no control tokens
  std::vector<int32_t> prefix(11);
  for (int32_t& x : prefix) x = d(rng);
  HellaswagTokens t;
  const size_t ending_len[4] = {1, 3, 8, 14};  // a one-token ending runs nothing past the prefix
  for (int s = 0; s < 4; ++s) {
    t.seq[s] = prefix;
    for (size_t k = 0; k < ending_len[s]; ++k) t.seq[s].push_back(d(rng));
    t.seq[s][prefix.size()] = static_cast<int32_t>(s);  // endings start with different tokens
  }
  t.common_prefix = prefix.size();
  return t;
}

TEST(HellaswagScore, CommonPrefixScoringEqualsFullForwardPasses) {
  Tiny t;
  ThreadPool pool(2);
  model::Context ctx(*t.model, 64, pool, /*n_batch=*/5);  // several batches for the prefix
  for (uint32_t seed : {1u, 2u, 3u}) {
    const HellaswagTokens task = random_task(static_cast<int32_t>(t.n_vocab()), seed);
    const HellaswagScore got = score_task(ctx, pool, task);
    const size_t cp = task.common_prefix;
    int best = 0;
    std::array<double, 4> want{};
    for (int s = 0; s < 4; ++s) {
      want[s] = direct_score(*t.model, task.seq[s], cp);
      EXPECT_NEAR(got.log_prob[s], want[s], 2e-5) << "seed " << seed << " ending " << s;
      if (want[s] > want[best]) best = s;
      // The tolerance is tight enough to tell a scoring offset by one token apart.
      if (task.seq[s].size() > cp + 1) {
        EXPECT_GT(std::abs(got.log_prob[s] - direct_score(*t.model, task.seq[s], cp + 1)), 1e-3);
      }
      EXPECT_GT(std::abs(got.log_prob[s] - direct_score(*t.model, task.seq[s], cp - 1)), 1e-3);
    }
    EXPECT_EQ(got.chosen, best) << seed;
  }
}

TEST(HellaswagScore, LogProbsFollowLlamaAndTheDefinition) {
  const std::vector<float> logits = testing::randn(1000, 3, 4.0f);
  for (int32_t target : {0, 17, 999}) {
    const double want = log_prob(logits.data(), 1000, target);
    EXPECT_NEAR(first_token_log_prob(logits.data(), 1000, target), want, 1e-5);
    EXPECT_NEAR(token_log_prob(logits.data(), 1000, target), want, 1e-4);
  }
}

TEST(HellaswagScore, TokenizeTaskFindsTheCommonPrefix) {
  Tiny t;
  const tokenizer::Tokenizer tok(tokenizer::read_vocab(t.model->file()));
  HellaswagTask task;
  task.context = "the world";
  task.endings = {"hello", "tell a model", "or", "of text"};
  const HellaswagTokens ht = tokenize_task(tok, task);
  const auto ctx_tokens = tok.encode("the world", true, false);
  ASSERT_GE(ht.common_prefix, ctx_tokens.size());
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(ht.seq[s], tok.encode("the world " + task.endings[s], true, false));
    EXPECT_GT(ht.seq[s].size(), ht.common_prefix);
  }
  EXPECT_TRUE(ht.seq[0][ht.common_prefix] != ht.seq[1][ht.common_prefix] ||
              ht.seq[0][ht.common_prefix] != ht.seq[2][ht.common_prefix] ||
              ht.seq[0][ht.common_prefix] != ht.seq[3][ht.common_prefix]);
  EXPECT_EQ(ht.longest(), ht.seq[1].size());
  // An ending equal to another's prefix still keeps one token to score.
  task.endings = {"a", "a", "a", "a b"};
  const HellaswagTokens same = tokenize_task(tok, task);
  EXPECT_EQ(same.common_prefix, same.seq[0].size() - 1);
  // No shared token at all (no BOS; " the" is one token, " a" two): an error.
  task.context = "";
  task.endings = {"the", "a", "b", "c"};
  EXPECT_THROW(tokenize_task(tok, task), UsageError);
}

TEST(HellaswagStats, LlamaFormulas) {
  AccuracyStats a;
  a.n = 400;
  a.n_correct = 160;
  EXPECT_DOUBLE_EQ(a.acc(), 0.4);
  EXPECT_NEAR(a.std_error(), std::sqrt(0.24 / 399), 1e-15);
  // Wilson: z = za^2/n; centre (p + z/2)/(1+z), half-width z sqrt(n (4p(1-p) + z)) / (2 za) / (1+z)
  const double za = 1.95996398454, z = za * za / 400;
  const double centre = (0.4 + z / 2) / (1 + z);
  const double half = z * std::sqrt(400 * (4 * 0.24 + z)) / (2 * za) / (1 + z);
  EXPECT_NEAR(a.wilson_low(), centre - half, 1e-15);
  EXPECT_NEAR(a.wilson_high(), centre + half, 1e-15);
  // The textbook form: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), for 160/400.
  EXPECT_NEAR(a.wilson_low(), 0.35316153, 1e-7);
  EXPECT_NEAR(a.wilson_high(), 0.44874093, 1e-7);
}

TEST(HellaswagRun, CountsCorrectTasksAndStopsOnRequest) {
  Tiny t;
  ThreadPool pool(2);
  model::Context ctx(*t.model, 64, pool);
  std::vector<HellaswagTask> tasks(3);
  std::vector<HellaswagTokens> toks;
  for (uint32_t s = 0; s < 3; ++s) toks.push_back(random_task(static_cast<int32_t>(t.n_vocab()), s + 10));
  for (int i = 0; i < 3; ++i) tasks[i].gold = score_task(ctx, pool, toks[i]).chosen;
  tasks[1].gold = (tasks[1].gold + 1) % 4;  // one wrong
  const std::vector<size_t> order = {0, 1, 2};
  int64_t calls = 0;
  HellaswagOptions opt;
  opt.on_task = [&](int64_t done, int64_t total, const HellaswagTaskResult& r,
                    const AccuracyStats& acc) {
    ++calls;
    EXPECT_EQ(total, 3);
    EXPECT_EQ(acc.n, done);
    EXPECT_EQ(r.task, order[done - 1]);
  };
  const HellaswagResult r = run_hellaswag(ctx, pool, tasks, order, toks, opt);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(r.acc.n, 3);
  EXPECT_EQ(r.acc.n_correct, 2);
  EXPECT_FALSE(r.tasks[1].correct());
  int64_t n_tok = 0;
  for (const auto& x : toks) n_tok += static_cast<int64_t>(x.n_evaluated());
  EXPECT_EQ(r.n_tokens, n_tok);
  EXPECT_EQ(toks[0].n_evaluated(), 11u + 0 + 2 + 7 + 13);
  opt.interrupted = [] { return true; };
  EXPECT_THROW(run_hellaswag(ctx, pool, tasks, order, toks, opt), Error);
}

// The real model and data: the first two tasks of the file scored with the common prefix equal
// full forward passes of each of their eight sequences (which also checks the tokenization of
// context + " " + ending and the prefix of real text).
TEST(HellaswagReal, SmolLM2FirstTasksEqualFullForwardPasses) {
  const std::string model_path = testing::default_model();
  const std::string data = testing::shared_data_file("hellaswag/hellaswag_val_full.txt");
  SQUEEZE_REQUIRE_FILE(model_path);
  SQUEEZE_REQUIRE_FILE(data);
  const auto tasks = read_hellaswag(data);
  ASSERT_EQ(tasks.size(), 10042u);
  EXPECT_EQ(tasks[0].gold, 3);
  auto m = model::Model::load(model_path);
  const tokenizer::Tokenizer tok(tokenizer::read_vocab(m->file()));
  ThreadPool pool(2);
  model::Context ctx(*m, 256, pool, 256);
  for (size_t i = 0; i < 2; ++i) {
    const HellaswagTokens t = tokenize_task(tok, tasks[i]);
    const auto ctx_tokens = tok.encode(tasks[i].context, true, false);
    EXPECT_GE(t.common_prefix, ctx_tokens.size() - 1) << i;  // the context, maybe less its last
    const HellaswagScore got = score_task(ctx, pool, t);
    for (int s = 0; s < 4; ++s) {
      // The prefix's KV cache reused gives the same logits as a full pass, to the bit.
      EXPECT_EQ(got.log_prob[s], direct_score(*m, t.seq[s], t.common_prefix, true))
          << "task " << i << " ending " << s;
      // llama's float log-softmax is within 1e-3 of the double one (49152 terms summed in float).
      EXPECT_NEAR(got.log_prob[s], direct_score(*m, t.seq[s], t.common_prefix), 1e-3);
    }
  }
}

}  // namespace
}  // namespace squeeze::eval
