// The forward pass on a tiny random model: batched prefill equals token-by-token decode,
// thread counts agree, and the context bounds are enforced.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/context.h"
#include "tiny_model.h"

namespace squeeze::model {
namespace {

std::string tiny_path(const char* name, const testing::TinyModelSpec& spec = {}) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  testing::write_tiny_model(path, spec);
  return path;
}

std::vector<float> run_tokens(const Model& m, const std::vector<int32_t>& toks, int threads,
                              bool one_by_one, int64_t n_batch = 256) {
  ThreadPool pool(threads);
  Context ctx(m, 64, pool, n_batch);
  std::vector<float> all;
  if (one_by_one) {
    for (int32_t t : toks) {
      const int32_t one[1] = {t};
      auto l = ctx.decode(one);
      all.insert(all.end(), l.begin(), l.end());
    }
  } else {
    auto l = ctx.decode(toks, /*all_logits=*/true);
    all.assign(l.begin(), l.end());
  }
  return all;
}

TEST(Context, BatchedPrefillEqualsTokenByToken) {
  auto m = Model::load(tiny_path("squeeze_tiny_ctx.gguf"));
  const std::vector<int32_t> toks = {5, 70, 100, 3, 200, 150, 9, 11, 255, 42};
  const auto a = run_tokens(*m, toks, 1, true);
  const auto b = run_tokens(*m, toks, 2, false);
  const auto c = run_tokens(*m, toks, 2, false, /*n_batch=*/3);  // chunked prefill
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-4f * (1 + std::abs(a[i]))) << i;
    ASSERT_NEAR(a[i], c[i], 1e-4f * (1 + std::abs(a[i]))) << i;
  }
}

// decode_from computes the output head only from row `first` on; those rows equal the full
// decode's, across batch boundaries (n_batch 3) and with no rows at all.
TEST(Context, DecodeFromReturnsTheTailRowsOfAFullDecode) {
  auto m = Model::load(tiny_path("squeeze_tiny_from.gguf"));
  const std::vector<int32_t> toks = {5, 70, 100, 3, 200, 150, 9, 11, 255, 42};
  const int64_t n_vocab = m->hparams().n_vocab;
  const auto full = run_tokens(*m, toks, 2, false, /*n_batch=*/3);
  for (int64_t first : {0, 4, 6, 9, 10}) {
    ThreadPool pool(2);
    Context ctx(*m, 64, pool, 3);
    const auto tail = ctx.decode_from(toks, first);
    ASSERT_EQ(static_cast<int64_t>(tail.size()), (10 - first) * n_vocab) << first;
    for (size_t i = 0; i < tail.size(); ++i) {
      ASSERT_EQ(tail[i], full[first * n_vocab + i]) << "first " << first << " i " << i;
    }
    EXPECT_EQ(ctx.n_past(), 10);
  }
  ThreadPool pool(1);
  Context ctx(*m, 64, pool);
  EXPECT_THROW(ctx.decode_from(toks, 11), UsageError);
}

TEST(Context, UntiedOutputAndF16Weights) {
  testing::TinyModelSpec spec;
  spec.tied_output = false;
  spec.matrix_type = formats::DType::F16;
  auto m = Model::load(tiny_path("squeeze_tiny_untied.gguf", spec));
  EXPECT_FALSE(m->tied_output);
  const auto a = run_tokens(*m, {1, 2, 3}, 1, true);
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
}

TEST(Context, OverflowIsAClearError) {
  auto m = Model::load(tiny_path("squeeze_tiny_overflow.gguf"));
  ThreadPool pool(1);
  Context ctx(*m, 8, pool);
  const std::vector<int32_t> toks(6, 7);
  ctx.decode(toks);
  try {
    ctx.decode(toks);
    FAIL() << "expected an overflow error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context overflow"), std::string::npos) << e.what();
  }
}

TEST(Context, RejectsContextAboveTrainedLength) {
  auto m = Model::load(tiny_path("squeeze_tiny_long.gguf"));
  ThreadPool pool(1);
  EXPECT_THROW(Context(*m, 100000, pool), UsageError);
}

TEST(Context, RejectsOutOfVocabularyToken) {
  auto m = Model::load(tiny_path("squeeze_tiny_vocab.gguf"));
  ThreadPool pool(1);
  Context ctx(*m, 16, pool);
  const int32_t bad[1] = {100000};
  EXPECT_THROW(ctx.decode(bad), UsageError);
}

TEST(ModelLoad, MissingTensorAndKeyAreClearErrors) {
  testing::TinyModelSpec no_tensor;
  no_tensor.skip_tensors = {"blk.1.ffn_up.weight"};
  try {
    Model::load(tiny_path("squeeze_tiny_notensor.gguf", no_tensor));
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.ffn_up.weight"), std::string::npos) << e.what();
  }
  testing::TinyModelSpec no_key;
  no_key.skip_keys = {"llama.embedding_length"};
  try {
    Model::load(tiny_path("squeeze_tiny_nokey.gguf", no_key));
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("llama.embedding_length"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace squeeze::model
