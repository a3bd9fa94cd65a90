// Perplexity and KL divergence on the tiny random model: the protocol against a direct
// computation from Context logits, a model against its own saved logits, and a pair of models
// against a double-precision KL divergence written from the definition.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "eval/perplexity.h"
#include "temp_dir.h"
#include "tiny_model.h"

namespace squeeze::eval {
namespace {

namespace fs = std::filesystem;

struct Tiny {
  std::unique_ptr<model::Model> model;
  explicit Tiny(uint64_t seed = 1) {
    const fs::path p = testing::temp_path("tiny_" + std::to_string(seed) + ".gguf");
    testing::TinyModelSpec spec;
    spec.seed = seed;
    spec.tied_output = false;  // tied random embeddings make every model predict its input
    testing::write_tiny_model(p.string(), spec);
    model = model::Model::load(p.string());
  }
  int64_t n_vocab() const { return model->hparams().n_vocab; }
};

std::vector<int32_t> random_tokens(size_t n, int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, n_vocab - 4);  // no control tokens
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = d(rng);
  return t;
}

// log-softmax in double, straight from the definition
std::vector<double> log_probs(const float* logits, int64_t n) {
  double mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max<double>(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(logits[i] - mx);
  std::vector<double> lp(n);
  for (int64_t i = 0; i < n; ++i) lp[i] = logits[i] - mx - std::log(sum);
  return lp;
}

// The logits of every position of each chunk, computed with a plain full decode.
std::vector<std::vector<float>> chunk_logits(const model::Model& m,
                                             const std::vector<int32_t>& toks,
                                             const ChunkPlan& plan, int32_t bos) {
  ThreadPool pool(2);
  model::Context ctx(m, plan.n_ctx, pool);
  std::vector<std::vector<float>> out;
  for (int64_t c = 0; c < plan.n_chunks; ++c) {
    std::vector<int32_t> chunk(toks.begin() + c * plan.n_ctx, toks.begin() + (c + 1) * plan.n_ctx);
    if (bos >= 0) chunk[0] = bos;
    ctx.reset();
    auto l = ctx.decode(chunk, /*all_logits=*/true);
    out.emplace_back(l.begin(), l.end());
  }
  return out;
}

TEST(PlanChunks, FollowsLlamaPerplexity) {
  const ChunkPlan p = plan_chunks(1000, 64);
  EXPECT_EQ(p.n_chunks, 15);  // 1000 / 64, the 40-token tail unused
  EXPECT_EQ(p.first, 32);
  EXPECT_EQ(p.n_scored(), 31);  // positions 32..62 predict tokens 33..63
  EXPECT_EQ(plan_chunks(1000, 64, 4).n_chunks, 4);
  EXPECT_EQ(plan_chunks(128, 64).n_chunks, 2);       // exactly 2 * ctx is enough
  EXPECT_THROW(plan_chunks(127, 64), UsageError);    // fewer is not
  EXPECT_THROW(plan_chunks(1000, 2), UsageError);
}

TEST(NllStats, HandComputed) {
  NllStats s;
  for (double v : {1.0, 2.0, 3.0}) s.add(v);
  EXPECT_DOUBLE_EQ(s.ppl(), std::exp(2.0));
  // var = 14/3 - 4 = 2/3; error = e^2 * sqrt((2/3) / 2)
  EXPECT_NEAR(s.ppl_error(), std::exp(2.0) * std::sqrt(1.0 / 3.0), 1e-12);
}

TEST(Perplexity, EqualsDirectComputationFromContextLogits) {
  Tiny t;
  const auto toks = random_tokens(300, static_cast<int32_t>(t.n_vocab()), 7);
  for (int32_t bos : {-1, static_cast<int32_t>(t.n_vocab() - 3)}) {
    const ChunkPlan plan = plan_chunks(static_cast<int64_t>(toks.size()), 48);
    ASSERT_EQ(plan.n_chunks, 6);
    const auto all = chunk_logits(*t.model, toks, plan, bos);
    double sum = 0;
    int64_t count = 0;
    for (int64_t c = 0; c < plan.n_chunks; ++c) {
      for (int64_t pos = plan.first; pos < plan.n_ctx - 1; ++pos) {
        const auto lp = log_probs(all[c].data() + pos * t.n_vocab(), t.n_vocab());
        sum -= lp[toks[c * plan.n_ctx + pos + 1]];
        ++count;
      }
    }
    ThreadPool pool(2);
    model::Context ctx(*t.model, plan.n_ctx, pool, /*n_batch=*/20);  // several batches a chunk
    const PerplexityResult r = run_perplexity(ctx, pool, toks, bos, plan);
    EXPECT_EQ(r.nll.count, count);
    EXPECT_EQ(count, 6 * 23);
    EXPECT_NEAR(r.nll.ppl(), std::exp(sum / count), 1e-6 * std::exp(sum / count)) << bos;
    EXPECT_GT(r.nll.ppl_error(), 0);
  }
}

std::string tmp(const char* name) { return testing::temp_path(name); }

PerplexityResult save_run(const Tiny& t, const std::vector<int32_t>& toks, const ChunkPlan& plan,
                          const std::string& path) {
  ThreadPool pool(2);
  model::Context ctx(*t.model, plan.n_ctx, pool);
  const auto vocab = tokenizer::read_vocab(t.model->file());
  LogitsWriter w(path, run_header(vocab, toks, plan));
  PerplexityOptions opt;
  opt.save = &w;
  PerplexityResult r = run_perplexity(ctx, pool, toks, -1, plan, opt);
  w.commit();
  return r;
}

PerplexityResult kld_run(const Tiny& t, const std::vector<int32_t>& toks, const ChunkPlan& plan,
                         const std::string& path) {
  ThreadPool pool(2);
  model::Context ctx(*t.model, plan.n_ctx, pool);
  LogitsReader reader(path);
  reader.check_matches(run_header(tokenizer::read_vocab(t.model->file()), toks, plan));
  PerplexityOptions opt;
  opt.base = &reader;
  return run_perplexity(ctx, pool, toks, -1, plan, opt);
}

TEST(Kld, ModelAgainstItsOwnLogitsIsExactlyZero) {
  Tiny t;
  const auto toks = random_tokens(400, static_cast<int32_t>(t.n_vocab()), 3);
  const ChunkPlan plan = plan_chunks(static_cast<int64_t>(toks.size()), 64);
  const std::string path = tmp("squeeze_eval_self.logits");
  const PerplexityResult saved = save_run(t, toks, plan, path);
  const PerplexityResult r = kld_run(t, toks, plan, path);
  ASSERT_TRUE(r.kld.has_value());
  const KldReport& k = *r.kld;
  EXPECT_EQ(k.count, plan.n_chunks * plan.n_scored());
  EXPECT_EQ(k.kld.value, 0.0);
  EXPECT_EQ(k.kld_max, 0.0);
  EXPECT_EQ(k.top1.value, 1.0);
  EXPECT_EQ(k.rms_p_diff.value, 0.0);
  EXPECT_EQ(k.ppl.value, k.ppl_base.value);
  EXPECT_DOUBLE_EQ(k.ppl_ratio.value, 1.0);
  EXPECT_NEAR(k.ppl.value, saved.nll.ppl(), 1e-6 * saved.nll.ppl());
}

TEST(Kld, TwoModelsMatchTheDefinition) {
  Tiny base(1), other(2);
  const auto toks = random_tokens(256, static_cast<int32_t>(base.n_vocab()), 5);
  const ChunkPlan plan = plan_chunks(static_cast<int64_t>(toks.size()), 64);
  const std::string path = tmp("squeeze_eval_pair.logits");
  save_run(base, toks, plan, path);
  const PerplexityResult r = kld_run(other, toks, plan, path);
  const auto lb_all = chunk_logits(*base.model, toks, plan, -1);
  const auto lq_all = chunk_logits(*other.model, toks, plan, -1);
  const int64_t n = base.n_vocab();
  double kld = 0, max_kld = 0;
  int64_t same = 0, count = 0;
  for (int64_t c = 0; c < plan.n_chunks; ++c) {
    for (int64_t pos = plan.first; pos < plan.n_ctx - 1; ++pos) {
      const float* fb = lb_all[c].data() + pos * n;
      const float* fq = lq_all[c].data() + pos * n;
      const auto lb = log_probs(fb, n), lq = log_probs(fq, n);
      double k = 0;
      for (int64_t i = 0; i < n; ++i) k += std::exp(lb[i]) * (lb[i] - lq[i]);
      kld += k;
      max_kld = std::max(max_kld, k);
      same += std::max_element(fb, fb + n) - fb == std::max_element(fq, fq + n) - fq;
      ++count;
    }
  }
  ASSERT_TRUE(r.kld.has_value());
  EXPECT_GT(kld / count, 0.01);  // the two random models really differ
  EXPECT_NEAR(r.kld->kld.value, kld / count, 1e-3 * kld / count + 1e-5);
  EXPECT_NEAR(r.kld->kld_max, max_kld, 1e-3 * max_kld + 1e-5);
  EXPECT_EQ(r.kld->top1.value, static_cast<double>(same) / count);
  EXPECT_LT(r.kld->top1.value, 1.0);
  EXPECT_NE(r.kld->ppl_ratio.value, 1.0);
}

TEST(Kld, InterruptedSaveLeavesNoFile) {
  Tiny t;
  const auto toks = random_tokens(256, static_cast<int32_t>(t.n_vocab()), 9);
  const ChunkPlan plan = plan_chunks(static_cast<int64_t>(toks.size()), 64);
  const std::string path = tmp("squeeze_eval_interrupted.logits");
  fs::remove(path);
  std::string temp;
  {
    ThreadPool pool(1);
    model::Context ctx(*t.model, plan.n_ctx, pool);
    LogitsWriter w(path, run_header(tokenizer::read_vocab(t.model->file()), toks, plan));
    temp = w.temp_path();
    EXPECT_TRUE(fs::exists(temp));
    int64_t calls = 0;
    PerplexityOptions opt;
    opt.save = &w;
    opt.interrupted = [&] { return ++calls > 2; };  // stop before the third chunk
    EXPECT_THROW(run_perplexity(ctx, pool, toks, -1, plan, opt), Error);
    EXPECT_THROW(w.commit(), Error);  // not every chunk was written
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(temp));
}

}  // namespace
}  // namespace squeeze::eval
