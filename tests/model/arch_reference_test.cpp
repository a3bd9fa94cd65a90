// The llama family's architectures (llama, llama with Llama 3.1's rope_freqs, llama with a
// SentencePiece vocabulary, qwen2 with q/k/v
// biases, qwen3 with QK-norm and a head width other than n_embd / n_head, qwen3moe with 8 experts
// of which 2 run per token) on tiny random-weight models against llama.cpp: the
// fixtures tests/data/tiny_ARCH.json hold llama.cpp's prompt ids, greedy tokens and every logit
// of every step (tools/make_greedy_fixture.py --tiny-arch ARCH, llama.cpp's AVX2 build) for the
// model tests/util/tiny_model.h writes. Teacher-forced on llama.cpp's tokens: every step picks
// llama.cpp's token, and no logit differs by more than 1e-3 of the step's logit spread.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "core/thread_pool.h"
#include "model/context.h"
#include "require_file.h"
#include "tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::model {
namespace {

class ArchReference : public ::testing::TestWithParam<const char*> {};

TEST_P(ArchReference, GreedyTokensAndLogitsEqualLlamaCpp) {
  const std::string arch = GetParam();
  const std::string fixture_path = squeeze::testing::data_file("tiny_" + arch + ".json");
  SQUEEZE_REQUIRE_FILE(fixture_path);
  std::ifstream in(fixture_path);
  const nlohmann::json fixture = nlohmann::json::parse(in);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("squeeze_arch_ref_" + std::to_string(::getpid()) + "_" + arch + ".gguf"))
                               .string();
  const squeeze::testing::TinyModelSpec spec = squeeze::testing::tiny_arch_spec(arch);
  squeeze::testing::write_tiny_model(path, spec);
  const auto model = Model::load(path);
  std::filesystem::remove(path);
  EXPECT_EQ(model->hparams().arch, spec.arch);
  EXPECT_EQ(model->layers[0].rope_freqs != nullptr, spec.rope_freqs);
  const tokenizer::Tokenizer tok(tokenizer::read_vocab(model->file()));
  ThreadPool pool(2);
  ASSERT_EQ(fixture["cases"].size(), 3u);
  double worst = 0;  // largest |difference| / spread
  for (const auto& c : fixture["cases"]) {
    const std::vector<int32_t> ids = c["prompt_ids"];
    ASSERT_EQ(tok.encode(c["prompt"].get<std::string>(), true, false), ids) << c["prompt"];
    const std::vector<int32_t> ref = c["greedy"];
    ASSERT_EQ(c["logits"].size(), ref.size());
    Context ctx(*model, 128, pool);
    std::span<const float> logits = ctx.decode(ids);
    for (size_t i = 0; i < ref.size(); ++i) {
      const std::vector<float> want = c["logits"][i];
      ASSERT_EQ(want.size(), logits.size());
      const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
      const double spread = *hi - *lo;
      double diff = 0;
      for (size_t v = 0; v < want.size(); ++v) {
        diff = std::max(diff, static_cast<double>(std::abs(logits[v] - want[v])));
      }
      worst = std::max(worst, diff / spread);
      EXPECT_LE(diff, 1e-3 * spread) << c["prompt"] << " step " << i;
      EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), ref[i])
          << c["prompt"] << " step " << i;
      const int32_t one[1] = {ref[i]};
      logits = ctx.decode(one);
    }
  }
  std::printf("  %s: largest logit difference %.2e of the spread\n", arch.c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Tiny, ArchReference, ::testing::Values("llama", "llama-rope-freqs", "llama-spm", "qwen2", "qwen3", "qwen3moe"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace squeeze::model
