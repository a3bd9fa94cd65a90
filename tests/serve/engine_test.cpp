// serve::Engine on SmolLM2: greedy requests give the same tokens alone and batched with others
// (chunked prefill, preemption by recompute included), n > 1, stop strings, lengths, the
// prefix cache, cancellation freeing the blocks.
#include "serve/engine.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "require_file.h"

namespace squeeze::serve {
namespace {

struct Loaded {
  std::unique_ptr<model::Model> model;
  tokenizer::Tokenizer tok;
  ThreadPool pool{2};
};

Loaded& smollm2() {
  static Loaded* l = [] {
    auto m = model::Model::load(testing::default_model());
    tokenizer::Tokenizer tok(tokenizer::read_vocab(m->file()));
    return new Loaded{std::move(m), std::move(tok)};
  }();
  return *l;
}

struct Choice {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::optional<Finish> finish;
};

// Steps the engine until every stream is done; each request's choices.
std::vector<std::vector<Choice>> drain(Engine& e, const std::vector<std::shared_ptr<RequestStream>>& streams,
                                       int32_t n = 1) {
  std::vector<std::vector<Choice>> out(streams.size(), std::vector<Choice>(static_cast<size_t>(n)));
  for (int guard = 0; guard < 100000; ++guard) {
    bool all_done = true;
    for (size_t r = 0; r < streams.size(); ++r) {
      while (auto ev = streams[r]->next(std::chrono::milliseconds(0))) {
        Choice& c = out[r][static_cast<size_t>(ev->choice)];
        c.text += ev->text;
        for (const TokenInfo& t : ev->tokens) {
          c.ids.push_back(t.id);
          c.logprobs.push_back(t.logprob);
        }
        if (ev->finish) c.finish = ev->finish;
      }
      all_done = all_done && streams[r]->done();
    }
    if (all_done) return out;
    e.step();
  }
  ADD_FAILURE() << "the engine did not finish";
  return out;
}

const char* kPrompts[] = {
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "List three colours:",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Water boils at a temperature of",
};

GenParams greedy(int64_t max_tokens) {
  GenParams p;
  p.sampling.temp = 0.0f;
  p.max_tokens = max_tokens;
  p.logprobs = 0;  // the token ids come back with the text
  return p;
}

std::vector<int32_t> encode(const char* text) {
  return smollm2().tok.encode(text, /*add_special=*/false, /*parse_special=*/false);
}

// The reference: one prompt alone in its own engine.
Choice alone(const char* prompt, int64_t max_tokens) {
  Loaded& l = smollm2();
  Engine e(*l.model, l.tok, l.pool, {256, 1, 0, 512, 8});
  return drain(e, {e.submit(encode(prompt), greedy(max_tokens))})[0][0];
}

std::vector<Choice> each_alone(int64_t max_tokens) {
  std::vector<Choice> want;
  for (const char* p : kPrompts) want.push_back(alone(p, max_tokens));
  return want;
}

void expect_same(const std::vector<Choice>& want, const std::vector<std::vector<Choice>>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i][0].ids, want[i].ids) << "request " << i;
    EXPECT_EQ(got[i][0].text, want[i].text) << "request " << i;
    EXPECT_EQ(got[i][0].finish, want[i].finish) << "request " << i;
  }
}

TEST(Engine, GreedyRequestsGiveTheSameTokensAloneAndBatched) {
  SQUEEZE_REQUIRE_FILE(testing::default_model());
  Loaded& l = smollm2();
  const auto want = each_alone(16);
  for (const auto& w : want) EXPECT_EQ(w.ids.size(), 16u);
  // All at once, prompts chunked by a budget of 16 tokens a step.
  Engine e(*l.model, l.tok, l.pool, {256, 8, 0, 16, 8});
  std::vector<std::shared_ptr<RequestStream>> s;
  for (const char* p : kPrompts) s.push_back(e.submit(encode(p), greedy(16)));
  expect_same(want, drain(e, s));
  EXPECT_EQ(e.metrics().generated_tokens, 5 * 16);
  EXPECT_EQ(e.metrics().kv_blocks_used, 0) << "every block released";
}

// A recomputed sequence runs its generated tokens as one prompt chunk (attention in the batch
// sum order, ops/pv.h), so after a preemption its tokens may differ from a run alone by float
// rounding; the first admitted is never preempted and stays exact.
TEST(Engine, PreemptedRequestsAreRecomputedAndFinish) {
  SQUEEZE_REQUIRE_FILE(testing::default_model());
  Loaded& l = smollm2();
  // 6 blocks of 16 tokens for five sequences of up to ~40 tokens: some must step back.
  Engine e(*l.model, l.tok, l.pool, {96, 5, 96, 64, 8});
  std::vector<std::shared_ptr<RequestStream>> s;
  for (const char* p : kPrompts) s.push_back(e.submit(encode(p), greedy(24)));
  const auto got = drain(e, s);
  EXPECT_GT(e.metrics().preemptions, 0);
  EXPECT_EQ(got[0][0].ids, alone(kPrompts[0], 24).ids);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i][0].finish.has_value()) << i;
    EXPECT_EQ(s[i]->usage().completion_tokens, static_cast<int64_t>(got[i][0].ids.size())) << i;
  }
  EXPECT_EQ(e.metrics().kv_blocks_used, 0);
}

TEST(Engine, ChoicesForkFromOnePrompt) {
  SQUEEZE_REQUIRE_FILE(testing::default_model());
  Loaded& l = smollm2();
  Engine e(*l.model, l.tok, l.pool, {256, 4, 0, 512, 8});
  GenParams p = greedy(12);
  p.n = 3;
  const auto stream = e.submit(encode(kPrompts[1]), p);
  const auto got = drain(e, {stream}, 3)[0];
  const auto want = alone(kPrompts[1], 12);
  for (const Choice& c : got) EXPECT_EQ(c.ids, want.ids) << "greedy choices are the same";
  EXPECT_EQ(stream->usage().completion_tokens, 36);
  // Sampled choices draw with their own seeds: seed + i.
  p.sampling.temp = 1.0f;
  p.sampling.seed = 5;
  const auto sampled = drain(e, {e.submit(encode(kPrompts[1]), p)}, 3)[0];
  GenParams one = p;
  one.n = 1;
  one.sampling.seed = 6;
  EXPECT_EQ(drain(e, {e.submit(encode(kPrompts[1]), one)})[0][0].ids, sampled[1].ids);
}

TEST(Engine, StopStringsEndTheTextBeforeThem) {
  SQUEEZE_REQUIRE_FILE(testing::default_model());
  Loaded& l = smollm2();
  const Choice full = alone(kPrompts[1], 32);
  ASSERT_GT(full.text.size(), 30u);
  const std::string stop = full.text.substr(20, 4);
  Engine e(*l.model, l.tok, l.pool, {256, 2, 0, 512, 8});
  GenParams p = greedy(32);
  p.stop = {"no such text", stop};
  const Choice got = drain(e, {e.submit(encode(kPrompts[1]), p)})[0][0];
  EXPECT_EQ(got.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(got.finish, Finish::Stop);
  EXPECT_EQ(full.finish, Finish::Length);
  // Without logprobs, and a stop string at each offset (one that begins in held-back text too).
  p.logprobs = -1;
  for (size_t at = 8; at < 16; ++at) {
    p.stop = {full.text.substr(at, 4)};
    const Choice c = drain(e, {e.submit(encode(kPrompts[1]), p)})[0][0];
    EXPECT_EQ(c.text, full.text.substr(0, full.text.find(p.stop[0]))) << "stop '" << p.stop[0] << "'";
  }
}

TEST(Engine, ThePrefixCacheServesARepeatedPrompt) {
  SQUEEZE_REQUIRE_FILE(testing::default_model());
  Loaded& l = smollm2();
  Engine e(*l.model, l.tok, l.pool, {256, 2, 0, 512, 8});
  std::vector<int32_t> prompt;
  for (int i = 0; i < 4; ++i) {
    const auto t = encode(kPrompts[1]);
    prompt.insert(prompt.end(), t.begin(), t.end());
  }
  const auto s1 = e.submit(prompt, greedy(8));
  const auto first = drain(e, {s1})[0][0];
  const auto s2 = e.submit(prompt, greedy(8));
  const auto second = drain(e, {s2})[0][0];
  EXPECT_EQ(s1->usage().cached_tokens, 0);
  EXPECT_EQ(s2->usage().cached_tokens, (static_cast<int64_t>(prompt.size()) - 1) / 16 * 16);
  EXPECT_EQ(e.metrics().cached_tokens, s2->usage().cached_tokens);
  EXPECT_EQ(second.text, first.text);
  // A prompt of whole blocks and one token: its cached blocks leave two tokens to compute, as a
  // prompt chunk (one token would run decode's attention, another summation order), so the
  // logits are those of the prompt alone, bit for bit.
  std::vector<int32_t> odd(prompt.begin(), prompt.begin() + 49);
  const auto o1 = e.submit(odd, greedy(4));
  const auto odd_first = drain(e, {o1})[0][0];
  const auto o2 = e.submit(odd, greedy(4));
  const auto odd_second = drain(e, {o2})[0][0];
  ASSERT_GE(prompt.size(), 49u);
  EXPECT_EQ(o2->usage().cached_tokens, 32);
  ASSERT_EQ(odd_second.logprobs.size(), odd_first.logprobs.size());
  for (size_t i = 0; i < odd_first.logprobs.size(); ++i) {
    EXPECT_EQ(odd_second.logprobs[i], odd_first.logprobs[i]) << "token " << i;
  }
  // Turned off (serve --no-prefix-cache), every prompt is computed in full.
  Engine off(*l.model, l.tok, l.pool, {256, 2, 0, 512, 8, /*prefix_cache=*/false});
  drain(off, {off.submit(prompt, greedy(8))});
  const auto s3 = off.submit(prompt, greedy(8));
  EXPECT_EQ(drain(off, {s3})[0][0].text, first.text);
  EXPECT_EQ(s3->usage().cached_tokens, 0);
}

TEST(Engine, CancellingFreesTheBlocksWithinAStep) {
  SQUEEZE_REQUIRE_FILE(testing::default_model());
  Loaded& l = smollm2();
  Engine e(*l.model, l.tok, l.pool, {256, 2, 0, 512, 8});
  const auto s = e.submit(encode(kPrompts[1]), greedy(100));
  for (int i = 0; i < 5; ++i) e.step();
  EXPECT_GT(e.context().kv().blocks().n_used(), 0);
  s->cancel();
  e.step();
  EXPECT_EQ(e.context().kv().blocks().n_used(), 0);
  std::optional<Finish> last;
  while (auto ev = s->next(std::chrono::milliseconds(0))) last = ev->finish ? ev->finish : last;
  EXPECT_EQ(last, Finish::Cancelled);
  EXPECT_TRUE(s->done());
}

TEST(Engine, BadRequestsAreRefused) {
  SQUEEZE_REQUIRE_FILE(testing::default_model());
  Loaded& l = smollm2();
  Engine e(*l.model, l.tok, l.pool, {64, 2, 0, 512, 1});
  EXPECT_THROW(e.submit({}, greedy(1)), UsageError);
  EXPECT_THROW(e.submit(std::vector<int32_t>(64, 1), greedy(1)), UsageError) << "no room to generate";
  EXPECT_THROW(e.submit({1, 1 << 30}, greedy(1)), UsageError);
  GenParams three = greedy(1);
  three.n = 3;
  EXPECT_THROW(e.submit({1, 2}, three), UsageError);
  EXPECT_NE(e.submit({1, 2}, greedy(1)), nullptr);
  EXPECT_EQ(e.submit({1, 2}, greedy(1)), nullptr) << "the queue holds one";
  EXPECT_THROW(Engine(*l.model, l.tok, l.pool, {64, 2, 32, 512, 1}), UsageError)
      << "a KV cache smaller than one context";
}

}  // namespace
}  // namespace squeeze::serve
