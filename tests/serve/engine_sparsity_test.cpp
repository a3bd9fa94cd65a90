// The engine under activation sparsity on the tiny model: split steps (SplitMode::Always) run
// each decode through the one-token sparse kernels, so every sequence gets exactly the tokens and
// log-probabilities it gets alone; batched steps (Never) run the dense products on the zeroed
// inputs (equal only to float rounding).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compress/sparsify.h"
#include "model/act_sparsity.h"
#include "serve/engine.h"
#include "temp_dir.h"
#include "tiny_model.h"

namespace squeeze::serve {
namespace {

// Each generated token with its log-probability: equal floats mean the same arithmetic.
using Tokens = std::vector<std::pair<int32_t, float>>;

// Steps the engine until every stream is done; each stream's tokens.
std::vector<Tokens> drain(Engine& e, const std::vector<std::shared_ptr<RequestStream>>& streams) {
  std::vector<Tokens> got(streams.size());
  auto take = [&] {
    bool done = true;
    for (size_t i = 0; i < streams.size(); ++i) {
      while (auto ev = streams[i]->next(std::chrono::milliseconds(0))) {
        for (const TokenInfo& t : ev->tokens) got[i].push_back({t.id, t.logprob});
      }
      done = done && streams[i]->done();
    }
    return done;
  };
  while (!take()) e.step();
  take();
  return got;
}

TEST(EngineSparsity, SplitStepsGiveEachSequenceItsTokensAlone) {
  const std::string path = testing::temp_path("engine_sparsity.gguf");
  testing::write_tiny_model(path);
  const auto m = model::Model::load(path);
  const tokenizer::Tokenizer tok(tokenizer::read_vocab(m->file()));
  ThreadPool pool(2);
  compress::SparsifyOptions o;
  o.levels = {0.5};
  o.n_samples = 8;
  o.ctx = 64;
  o.heldout_samples = 4;
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the river of stone " + std::to_string(i * 7919 % 1000) + " north.\n";
  const auto r = compress::calibrate_sparsity(*m, tok, text, o, pool);
  const model::ActSparsity policy(*m, r.table, 0.5, pool);

  const std::vector<std::string> prompts = {"the king found a small city", "in 1840 the battle",
                                            "her first album was released by"};
  GenParams p;
  p.sampling.temp = 0.0f;
  p.max_tokens = 12;
  p.logprobs = 0;
  std::vector<Tokens> alone;
  for (const std::string& text_in : prompts) {
    Engine e(*m, tok, pool, {128, 1, 0, 64, 4});
    e.context().set_act_sparsity(&policy);
    alone.push_back(drain(e, {e.submit(tok.encode(text_in, false, false), p)})[0]);
    ASSERT_FALSE(alone.back().empty());
  }
  EngineConfig split{128, 3, 0, 64, 4};
  split.split = SplitMode::Always;
  Engine e(*m, tok, pool, split);
  e.context().set_act_sparsity(&policy);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const std::string& text_in : prompts) streams.push_back(e.submit(tok.encode(text_in, false, false), p));
  const std::vector<Tokens> got = drain(e, streams);
  for (size_t i = 0; i < streams.size(); ++i) EXPECT_EQ(got[i], alone[i]) << "request " << i;
  EXPECT_GT(e.metrics().split_steps, 0);
}

}  // namespace
}  // namespace squeeze::serve
