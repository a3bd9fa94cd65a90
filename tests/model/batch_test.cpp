// Context::decode_batch: sequences decoded together in one batch, interleaved or not, give the
// logits each gives alone (bit for bit: integer weight formats), and bad batches are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/context.h"
#include "random.h"
#include "require_file.h"
#include "tiny_model.h"

namespace squeeze::model {
namespace {

std::vector<int32_t> some_tokens(int64_t n, int64_t n_vocab, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint32_t x = seed;
  for (int32_t& v : t) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<int32_t>(x % static_cast<uint32_t>(n_vocab));
  }
  return t;
}

// The logits of every token of each sequence decoded alone: a prompt in one call, then each
// continuation token by itself.
std::vector<std::vector<float>> alone(const Model& m, ThreadPool& pool,
                                      const std::vector<std::vector<int32_t>>& prompts,
                                      const std::vector<std::vector<int32_t>>& gen) {
  std::vector<std::vector<float>> out;
  for (size_t s = 0; s < prompts.size(); ++s) {
    Context ctx(m, 128, pool);
    auto l = ctx.decode(prompts[s], /*all_logits=*/true);
    std::vector<float> all(l.begin(), l.end());
    for (int32_t t : gen[s]) {
      const int32_t one[1] = {t};
      auto g = ctx.decode(one);
      all.insert(all.end(), g.begin(), g.end());
    }
    out.push_back(std::move(all));
  }
  return out;
}

// The same, all sequences in one context: the prompts in one batch, interleaved token by token
// (or one after the other), then each step's continuation tokens of all sequences in one batch.
std::vector<std::vector<float>> together(const Model& m, ThreadPool& pool,
                                         const std::vector<std::vector<int32_t>>& prompts,
                                         const std::vector<std::vector<int32_t>>& gen,
                                         bool interleave) {
  const auto n_seq = static_cast<int64_t>(prompts.size());
  const int64_t n_vocab = m.hparams().n_vocab;
  Context ctx(m, 128, pool, 256, n_seq);
  std::vector<std::vector<float>> out(prompts.size());
  Batch b;
  std::vector<std::pair<int32_t, int32_t>> order;  // (seq, index) of each batch row
  if (interleave) {
    for (size_t i = 0;; ++i) {
      bool any = false;
      for (int32_t s = 0; s < n_seq; ++s) {
        if (i < prompts[s].size()) order.push_back({s, static_cast<int32_t>(i)}), any = true;
      }
      if (!any) break;
    }
  } else {
    for (int32_t s = 0; s < n_seq; ++s) {
      for (size_t i = 0; i < prompts[s].size(); ++i) order.push_back({s, static_cast<int32_t>(i)});
    }
  }
  for (auto [s, i] : order) b.add(prompts[s][i], i, s, true);
  auto l = ctx.decode_batch(b);
  for (size_t r = 0; r < order.size(); ++r) {
    const float* row = l.data() + r * n_vocab;
    out[order[r].first].insert(out[order[r].first].end(), row, row + n_vocab);
  }
  for (size_t step = 0; step < gen[0].size(); ++step) {
    Batch g;
    for (int32_t s = 0; s < n_seq; ++s) {
      g.add(gen[s][step], static_cast<int32_t>(ctx.n_past(s)), s, true);
    }
    auto gl = ctx.decode_batch(g);
    for (int32_t s = 0; s < n_seq; ++s) {
      out[s].insert(out[s].end(), gl.data() + s * n_vocab, gl.data() + (s + 1) * n_vocab);
    }
  }
  return out;
}

void expect_same_bits(const std::vector<std::vector<float>>& a,
                      const std::vector<std::vector<float>>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t s = 0; s < a.size(); ++s) {
    ASSERT_EQ(a[s].size(), b[s].size()) << what << " seq " << s;
    EXPECT_EQ(std::memcmp(a[s].data(), b[s].data(), a[s].size() * sizeof(float)), 0)
        << what << ": sequence " << s << " differs from itself decoded alone";
  }
}

void check_batches(const Model& m, int64_t len0) {
  const int64_t n_vocab = m.hparams().n_vocab;
  // Prompts of different lengths; three continuation tokens each.
  const std::vector<std::vector<int32_t>> prompts = {some_tokens(len0, n_vocab, 1),
                                                     some_tokens(len0 / 2 + 3, n_vocab, 2),
                                                     some_tokens(5, n_vocab, 3)};
  const std::vector<std::vector<int32_t>> gen = {some_tokens(3, n_vocab, 4),
                                                 some_tokens(3, n_vocab, 5),
                                                 some_tokens(3, n_vocab, 6)};
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    const auto want = alone(m, pool, prompts, gen);
    expect_same_bits(want, together(m, pool, prompts, gen, /*interleave=*/true), "interleaved");
    expect_same_bits(want, together(m, pool, prompts, gen, /*interleave=*/false), "in turn");
  }
}

TEST(Batch, SequencesTogetherEqualEachAloneTinyModel) {
  const std::string path = (std::filesystem::temp_directory_path() / "squeeze_batch_tiny.gguf").string();
  testing::write_tiny_model(path, {});
  check_batches(*Model::load(path), 20);
}

TEST(Batch, SequencesTogetherEqualEachAloneSmolLM2) {
  SQUEEZE_REQUIRE_FILE(testing::default_model());
  // Prompts of 40 tokens: batches of 16 or more take the tile kernels (AMX where present).
  check_batches(*Model::load(testing::default_model()), 40);
}

TEST(Batch, BadBatchesAreRefusedAndChangeNothing) {
  const std::string path = (std::filesystem::temp_directory_path() / "squeeze_batch_bad.gguf").string();
  testing::write_tiny_model(path, {});
  const auto m = Model::load(path);
  ThreadPool pool(1);
  Context ctx(*m, 8, pool, 256, 2);
  Batch ok;
  ok.add(1, 0, 0, true);
  ok.add(2, 0, 1, true);
  ctx.decode_batch(ok);
  auto refused = [&](Batch b) {
    EXPECT_THROW(ctx.decode_batch(b), Error);
    EXPECT_EQ(ctx.n_past(0), 1);
    EXPECT_EQ(ctx.n_past(1), 1);
  };
  Batch gap;  // sequence 0 continues at 1, not 2
  gap.add(3, 2, 0, true);
  refused(gap);
  Batch other_seq;
  other_seq.add(3, 1, 2, true);
  refused(other_seq);
  Batch order;  // positions out of order within a sequence
  order.add(3, 2, 1, false);
  order.add(3, 1, 1, true);
  refused(order);
  Batch overflow;
  for (int32_t p = 1; p < 10; ++p) overflow.add(4, p, 0, p == 9);
  refused(overflow);
  Batch vocab;
  vocab.add(1 << 30, 1, 0, true);
  refused(vocab);
  Batch ragged = ok;
  ragged.seq.pop_back();
  refused(ragged);
  // A batch without wanted logits runs and returns none.
  Batch quiet;
  quiet.add(5, 1, 0, false);
  EXPECT_TRUE(ctx.decode_batch(quiet).empty());
  EXPECT_EQ(ctx.n_past(0), 2);
}

TEST(Batch, AFullKvCacheRefusesTheBatchAndChangesNothing) {
  const std::string path = (std::filesystem::temp_directory_path() / "squeeze_batch_full.gguf").string();
  testing::write_tiny_model(path, {});
  const auto m = Model::load(path);
  ThreadPool pool(1);
  Context ctx(*m, 32, pool, 256, 2, 32);  // two blocks of 16 for both sequences
  EXPECT_EQ(ctx.kv().capacity(), 32);
  Batch first;
  for (int32_t p = 0; p < 20; ++p) first.add(1, p, 0, p == 19);
  ctx.decode_batch(first);
  Batch both;
  both.add(2, 20, 0, true);
  for (int32_t p = 0; p < 16; ++p) both.add(3, p, 1, p == 15);  // one block: none is left
  EXPECT_THROW(ctx.decode_batch(both), Error);
  EXPECT_EQ(ctx.n_past(0), 20);
  EXPECT_EQ(ctx.n_past(1), 0);
  ctx.reset(0);
  EXPECT_NO_THROW(ctx.decode_batch([] {
    Batch b;
    for (int32_t p = 0; p < 16; ++p) b.add(3, p, 1, p == 15);
    return b;
  }()));
  EXPECT_EQ(ctx.n_past(1), 16);
}

}  // namespace
}  // namespace squeeze::model
