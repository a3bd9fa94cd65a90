// serve::Generator and the generation loop: greedy generation is the argmax chain of the
// model's own logits, the loop stops where it says, and bad set-ups are clear errors.
#include "serve/generator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "temp_dir.h"
#include "tiny_model.h"

namespace squeeze::serve {
namespace {

// A tiny model file of this test's own, removed when the process exits.
std::string tiny_path() {
  const std::string p = squeeze::testing::temp_path(
      std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".gguf");
  testing::write_tiny_model(p, {});
  return p;
}

GeneratorOptions greedy(const std::string& path) {
  GeneratorOptions o;
  o.model_path = path;
  o.n_ctx = 64;
  o.threads = 2;
  o.sampling.temp = 0.0f;
  return o;
}

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(Generator, GreedyIsTheArgmaxChainAndStopsAtTheLength) {
  const std::string path = tiny_path();
  Generator g(greedy(path));
  const std::vector<int32_t> prompt = {1, 5, 9, 2};
  std::vector<int32_t> out;
  std::string text;
  const GenerationStats st =
      g.generate(prompt, 6, [&](std::string_view s) { text += s; }, &out);
  EXPECT_EQ(st.n_prompt, 4);
  // The last token sampled before the length is reached is not decoded; an end token is never
  // kept.
  const auto n_out = static_cast<int64_t>(out.size());
  EXPECT_EQ(g.context().n_past(), 4 + (st.stop_reason == "length" ? n_out - 1 : n_out));

  // The same chain by hand on a fresh context of the same model.
  ThreadPool pool(1);
  model::Context ctx(g.model(), 64, pool);
  std::vector<int32_t> want;
  auto logits = ctx.decode(prompt);
  for (size_t i = 0; i < out.size(); ++i) {
    const int32_t next = argmax(logits);
    want.push_back(next);
    const int32_t one[1] = {next};
    logits = ctx.decode(one);
  }
  EXPECT_EQ(out, want);
  if (st.stop_reason == "length") {
    EXPECT_EQ(st.n_generated, 6);
  } else {
    EXPECT_EQ(st.stop_reason, "eog");
    EXPECT_TRUE(g.tokenizer().is_eog(argmax(logits)));
  }
  EXPECT_EQ(text, g.tokenizer().decode(out));
}

TEST(Generator, StopsWhenTheContextIsFull) {
  const std::string path = tiny_path();
  GeneratorOptions o = greedy(path);
  o.n_ctx = 8;
  Generator g(o);
  const std::vector<int32_t> prompt = {1, 5, 9};
  const GenerationStats st = g.generate(prompt, -1, [](std::string_view) {});
  if (st.stop_reason != "eog") {
    EXPECT_EQ(st.stop_reason, "context");
    EXPECT_EQ(g.context().n_past(), 8);
  }
  EXPECT_THROW(g.generate({}, 1, [](std::string_view) {}), UsageError);
}

TEST(Generator, BadSetUpsAreErrors) {
  const std::string path = tiny_path();
  GeneratorOptions o = greedy(path);
  o.head_sparsity = 0.5;
  EXPECT_THROW(Generator{o}, UsageError);  // head sparsity without --act-sparsity
  o = greedy(path);
  o.act_sparsity = 0.5;
  EXPECT_THROW(Generator{o}, UsageError);  // the tiny model has no sparsity table
  o = greedy(path);
  o.n_ctx = 1 << 20;
  EXPECT_THROW(Generator{o}, UsageError);  // beyond the model's context
  o = greedy(path + ".missing");
  EXPECT_THROW(Generator{o}, Error);
}

}  // namespace
}  // namespace squeeze::serve
