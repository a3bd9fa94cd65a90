// Prefill-only layer skipping (POP, Context::set_prefill_skip) against a reference built from
// other parts: a skipped layer leaves a prompt token's residual unchanged, which is what the
// same model with that layer's wo and ffn_down zeroed computes, while writing the same K and V.
// So the prompt but its last token runs on the zeroed model, its KV cache is handed to the real
// model, and the last prompt token and the tokens after it run there: logits must agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "model/names.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/context.h"
#include "tiny_model.h"

namespace squeeze::model {
namespace {

testing::TinyModelSpec spec_of(const std::string& arch) {
  testing::TinyModelSpec spec = testing::tiny_arch_spec(arch);
  spec.n_layer = 4;
  return spec;
}

// The tiny model, and the same with the wo and ffn_down of `zeroed` layers all zero.
std::unique_ptr<Model> load_model(const testing::TinyModelSpec& spec,
                                  const std::vector<int>& zeroed = {}) {
  std::vector<uint8_t> bytes = testing::tiny_model_writer(spec).to_bytes();
  const gguf::File f = gguf::File::from_bytes("tiny", bytes);
  for (const gguf::TensorInfo& t : f.tensors()) {
    for (const int il : zeroed) {
      const std::string p = "blk." + std::to_string(il) + ".";
      if (t.name == p + "attn_output.weight" || t.name == p + "ffn_down.weight" ||
          t.name == p + "ffn_down_exps.weight") {
        const size_t off = static_cast<const uint8_t*>(t.data) - f.file_data();
        std::memset(bytes.data() + off, 0, t.n_bytes);
      }
    }
  }
  return Model::load(gguf::File::from_bytes("tiny", bytes));
}

std::vector<uint8_t> skip_set(int64_t n_layer, const std::vector<int>& layers) {
  std::vector<uint8_t> s(static_cast<size_t>(n_layer), 0);
  for (const int il : layers) s[static_cast<size_t>(il)] = 1;
  return s;
}

const std::vector<int32_t> kPrompt = {5, 70, 100, 3, 200, 150, 9, 11, 255, 42, 17, 64, 31};
const std::vector<int32_t> kNext = {8, 90, 120};

// Logits of the last prompt token, then of each of kNext decoded one by one.
std::vector<float> generate(Context& ctx) {
  const auto l = ctx.decode(kPrompt);
  std::vector<float> out(l.begin(), l.end());
  for (const int32_t t : kNext) {
    const int32_t one[1] = {t};
    const auto n = ctx.decode(one);
    out.insert(out.end(), n.begin(), n.end());
  }
  return out;
}

TEST(PrefillSkip, EmptyOrAllZeroSetIsBitIdenticalToDense) {
  const auto m = load_model(spec_of("llama"));
  ThreadPool pool(2);
  Context dense(*m, 64, pool, 5);
  const auto want = generate(dense);
  for (const auto& set : {std::vector<uint8_t>{}, skip_set(4, {})}) {
    Context ctx(*m, 64, pool, 5);
    ctx.set_prefill_skip(set);
    EXPECT_TRUE(ctx.prefill_skip().empty());
    const auto got = generate(ctx);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  }
}

void expect_matches_reference(const std::string& arch, const std::vector<int>& skipped,
                              int64_t n_batch) {
  SCOPED_TRACE(arch);
  const auto spec = spec_of(arch);
  const auto m = load_model(spec);
  const auto zeroed = load_model(spec, skipped);
  ThreadPool pool(2);
  Context pop(*m, 64, pool, n_batch);
  pop.set_prefill_skip(skip_set(spec.n_layer, skipped));
  const auto got = generate(pop);

  Context ref_prompt(*zeroed, 64, pool, n_batch);
  ref_prompt.decode(std::span(kPrompt).first(kPrompt.size() - 1));
  Context ref(*m, 64, pool, n_batch);
  ref.kv_mut() = ref_prompt.kv();
  ASSERT_EQ(ref.n_past(), static_cast<int64_t>(kPrompt.size()) - 1);
  const auto l = ref.decode(std::span(kPrompt).last(1));
  std::vector<float> want(l.begin(), l.end());
  for (const int32_t t : kNext) {
    const int32_t one[1] = {t};
    const auto n = ref.decode(one);
    want.insert(want.end(), n.begin(), n.end());
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::abs(want[i]))) << i;
  }

  // Skipping changes the result (the test can fail): dense differs from it, except when only
  // the last layer is skipped: a prompt token's output of the last layer feeds nothing but its
  // own logits, so skipping it in prefill is free.
  Context dense(*m, 64, pool, n_batch);
  const auto d = generate(dense);
  float diff = 0;
  for (size_t i = 0; i < d.size(); ++i) diff = std::max(diff, std::abs(d[i] - got[i]));
  if (skipped == std::vector<int>{static_cast<int>(spec.n_layer) - 1}) {
    EXPECT_EQ(diff, 0.0f);
  } else {
    EXPECT_GT(diff, 1e-3f);
  }
}

TEST(PrefillSkip, SkippedLayersWriteKvAndTheLastPromptTokenRunsEveryLayer) {
  expect_matches_reference("llama", {1, 2}, 256);
  expect_matches_reference("llama", {3}, 4);   // chunked prompt; the last layer
  expect_matches_reference("llama", {0, 3}, 1);  // one token per chunk
  expect_matches_reference("qwen2", {2}, 256);   // q/k/v biases
  expect_matches_reference("qwen3", {1, 3}, 5);  // QK-norm
  expect_matches_reference("qwen3moe", {2}, 256);
}

// In a batch of two sequences, one's prompt runs pruned while the other decodes: each equals
// the same work done alone.
TEST(PrefillSkip, BatchedSequencesEqualEachAlone) {
  const auto m = load_model(spec_of("llama"));
  ThreadPool pool(2);
  const auto set = skip_set(4, {1, 2});
  const int64_t n_vocab = m->hparams().n_vocab;

  Context alone(*m, 64, pool);
  alone.set_prefill_skip(set);
  const auto a0 = alone.decode(kPrompt);
  const std::vector<float> first(a0.begin(), a0.end());
  const int32_t one[1] = {kNext[0]};
  const auto a1 = alone.decode(one);
  const std::vector<float> second(a1.begin(), a1.end());

  Context both(*m, 64, pool, 256, 2);
  both.set_prefill_skip(set);
  Batch b;
  for (size_t i = 0; i < kPrompt.size(); ++i) {
    b.add(kPrompt[i], static_cast<int32_t>(i), 0, i + 1 == kPrompt.size());
  }
  both.decode_batch(b);  // sequence 0's prompt
  Batch c;
  c.add(kNext[0], static_cast<int32_t>(kPrompt.size()), 0, true);  // its decode
  for (size_t i = 0; i < kPrompt.size(); ++i) {                    // sequence 1's prompt
    c.add(kPrompt[i], static_cast<int32_t>(i), 1, i + 1 == kPrompt.size());
  }
  const auto l = both.decode_batch(c);
  ASSERT_EQ(static_cast<int64_t>(l.size()), 2 * n_vocab);
  for (int64_t i = 0; i < n_vocab; ++i) {
    ASSERT_NEAR(l[i], second[i], 1e-4f * (1 + std::abs(second[i]))) << i;
    ASSERT_NEAR(l[n_vocab + i], first[i], 1e-4f * (1 + std::abs(first[i]))) << i;
  }
}

TEST(PrefillSkip, AWrongLengthIsAUsageError) {
  const auto m = load_model(spec_of("llama"));
  ThreadPool pool(1);
  Context ctx(*m, 64, pool);
  EXPECT_THROW(ctx.set_prefill_skip(std::vector<uint8_t>(3, 1)), UsageError);
}

}  // namespace
}  // namespace squeeze::model

namespace squeeze::model {
namespace {

// Head pruning: within each chunk of positions (forward chunks a multiple of it, so none is
// split) every prompt token but the last has the same
// n_head - k heads zero in its attention output (kqv_out), and the last prompt token none;
// keep = 1 is the dense path.
TEST(PrefillHeads, MasksApplyPerChunkAndSpareTheLastToken) {
  auto spec = spec_of("llama");
  spec.n_head = 8;
  spec.n_head_kv = 2;
  const auto m = load_model(spec);
  ThreadPool pool(2);
  const int64_t hd = m->hparams().head_dim, n_head = 8;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 29 + 3) % 250);
  for (const char* score : {"qk", "entropy", "vnorm", "a2sf"}) {
    SCOPED_TRACE(score);
    Context ctx(*m, 64, pool, 24);  // forward chunks of two head chunks
    ctx.set_prefill_heads(HeadPruning{0.5, 12, ops::parse_head_score(score)});
    // [layer][position] -> the mask of zero heads
    std::map<std::pair<int, int64_t>, std::vector<uint8_t>> zero;
    int64_t pos = 0;
    ctx.set_callback([&](std::string_view name, int layer, const float* data, int64_t rows, int64_t) {
      if (name != names::kKqvOut) return;
      for (int64_t t = 0; t < rows; ++t) {
        std::vector<uint8_t> z(n_head);
        for (int64_t h = 0; h < n_head; ++h) {
          const float* o = data + (t * n_head + h) * hd;
          z[h] = std::all_of(o, o + hd, [](float x) { return x == 0.0f; });
        }
        zero[{layer, pos + t}] = z;
      }
      if (layer == 3) pos += rows;
    });
    ctx.decode(prompt);
    ASSERT_EQ(pos, 40);
    for (int layer = 0; layer < 4; ++layer) {
      for (int64_t p = 0; p < 39; ++p) {
        const auto& z = zero[{layer, p}];
        EXPECT_EQ(std::count(z.begin(), z.end(), 1), 4) << layer << " " << p;
        if (p % 12 != 0) {
          EXPECT_EQ(z, (zero[{layer, p - 1}])) << layer << " " << p;
        }
      }
      const auto& last = zero[{layer, 39}];
      EXPECT_EQ(std::count(last.begin(), last.end(), 1), 0) << layer;
    }
  }
  // Whole KV groups: each chunk drops one of the two groups of 4 heads, entire.
  {
    Context ctx(*m, 64, pool, 24);
    HeadPruning hp{0.5, 12};
    hp.whole_groups = true;
    ctx.set_prefill_heads(hp);
    int64_t checked = 0;
    ctx.set_callback([&](std::string_view name, int, const float* data, int64_t rows, int64_t) {
      if (name != names::kKqvOut || rows < 2) return;
      for (int64_t t = 0; t < rows; ++t) {
        std::vector<uint8_t> z(n_head);
        for (int64_t h = 0; h < n_head; ++h) {
          const float* o = data + (t * n_head + h) * hd;
          z[h] = std::all_of(o, o + hd, [](float x) { return x == 0.0f; });
        }
        EXPECT_TRUE(z == (std::vector<uint8_t>{1, 1, 1, 1, 0, 0, 0, 0}) ||
                    z == (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 1, 1}));
        ++checked;
      }
    });
    ctx.decode(prompt);
    EXPECT_EQ(checked, 4 * 39);
  }
  // A stored ranking: every chunk of a layer drops the same heads, those of lowest score.
  {
    Context ctx(*m, 64, pool, 24);
    HeadPruning hp{0.25, 12};
    for (int64_t i = 0; i < 4 * n_head; ++i) hp.fixed.push_back(static_cast<float>((i * 5) % 8));
    ctx.set_prefill_heads(hp);
    std::vector<int64_t> zero_rows(4, 0);
    ctx.set_callback([&](std::string_view name, int layer, const float* data, int64_t rows, int64_t) {
      if (name != names::kKqvOut || rows < 2) return;
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t h = 0; h < n_head; ++h) {
          const float* o = data + (t * n_head + h) * hd;
          const bool zero = std::all_of(o, o + hd, [](float x) { return x == 0.0f; });
          const float sc = hp.fixed[layer * n_head + h];  // the two of score 6 or 7 run
          ASSERT_EQ(zero, sc < 6.0f) << layer << " " << t << " " << h;
        }
      }
      zero_rows[layer] += rows;
    });
    ctx.decode(prompt);
    EXPECT_EQ(zero_rows, (std::vector<int64_t>{39, 39, 39, 39}));
    hp.fixed.pop_back();
    EXPECT_THROW(ctx.set_prefill_heads(hp), UsageError);
  }
  Context ctx(*m, 64, pool);
  ctx.set_prefill_heads(HeadPruning{1.0, 12});
  EXPECT_FALSE(ctx.prefill_heads().has_value());
  EXPECT_THROW(ctx.set_prefill_heads(HeadPruning{0.0, 12}), UsageError);
  EXPECT_THROW(ctx.set_prefill_heads(HeadPruning{0.5, 0}), UsageError);
}

}  // namespace
}  // namespace squeeze::model
