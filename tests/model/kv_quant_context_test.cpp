// A context on a quantized KV cache: while every token is in the f16 window a prompt's logits
// are the f16 cache's to the bit and a decode's within float rounding (its attention reads the
// cache in place, kv/kv_attention.h, without llama.cpp's half-float rounding of Q and P); past
// the window attention reads the codes (8 bits close to f16, 2 bits further off); bad options
// are refused before anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/context.h"
#include "tiny_model.h"

namespace squeeze::model {
namespace {

std::unique_ptr<Model> tiny() {
  testing::TinyModelSpec spec = testing::tiny_arch_spec("llama");
  spec.n_ctx_train = 256;
  spec.n_layer = 3;
  return Model::load(gguf::File::from_bytes("tiny", testing::tiny_model_writer(spec).to_bytes()));
}

// Logits of 160 tokens decoded in chunks of 24, then 8 one at a time (all logits, in order).
std::vector<float> run(const Model& m, const kv::KvOptions& o) {
  ThreadPool pool(2);
  Context ctx(m, 256, pool, 64, 1, 0, o);
  std::vector<int32_t> tokens(168);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % 250);
  std::vector<float> out;
  for (size_t t0 = 0; t0 < 160; t0 += 24) {
    const auto l = ctx.decode(std::span(tokens).subspan(t0, std::min<size_t>(24, 160 - t0)), true);
    out.insert(out.end(), l.begin(), l.end());
  }
  for (size_t t = 160; t < 168; ++t) {
    const auto l = ctx.decode(std::span(tokens).subspan(t, 1));
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

TEST(KvQuantContext, AllInTheWindowIsF16ToTheBitThenCodesAreRead) {
  const auto m = tiny();
  const std::vector<float> f16 = run(*m, {});
  for (const kv::KeyAxis axis : {kv::KeyAxis::Channel, kv::KeyAxis::Token}) {
    const std::vector<float> hot = run(*m, {kv::KvType::Q2, axis, 16, 256, 0});
    const size_t prompt = 160 * static_cast<size_t>(m->hparams().n_vocab);
    EXPECT_TRUE(std::equal(f16.begin(), f16.begin() + prompt, hot.begin()));
    EXPECT_LT(max_diff(f16, hot), 2e-3f);
    const float d8 = max_diff(f16, run(*m, {kv::KvType::Q8, axis, 16, 16, 0}));
    const float d2 = max_diff(f16, run(*m, {kv::KvType::Q2, axis, 16, 16, 0}));
    EXPECT_GT(d8, 0.0f);
    EXPECT_LT(d8, 0.02f);
    EXPECT_GT(d2, 5 * d8);
    std::printf("  %s keys: hot %.2e, q8 %.2e, q2 %.2e\n", axis == kv::KeyAxis::Channel ? "channel" : "token",
                max_diff(f16, hot), d8, d2);
  }
}

TEST(KvQuantContext, BadOptionsAreRefused) {
  const auto m = tiny();
  ThreadPool pool(1);
  EXPECT_THROW(Context(*m, 128, pool, 64, 1, 0, {kv::KvType::Q4, kv::KeyAxis::Channel, 0, 0, 0}),
               UsageError);
  EXPECT_THROW(Context(*m, 128, pool, 64, 1, 0, {kv::KvType::Q4, kv::KeyAxis::Channel, 24, 0, 0}),
               UsageError);  // 24 does not divide the row of 32
}

}  // namespace
}  // namespace squeeze::model
