// Sequences that share KV blocks: a prompt prefix taken from the prefix cache, and a fork (n > 1)
// that diverges after the prompt, give the logits of the same tokens decoded without sharing
// (bit for bit: integer weight formats), and the shared blocks are not overwritten.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "model/context.h"
#include "require_file.h"
#include "temp_dir.h"
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

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A second prompt with the first one's first 40 tokens: it takes 32 from the cache (two blocks)
// and decodes 13; their logits equal a fresh context's for the whole prompt.
void check_prefix_reuse(const Model& m) {
  const int64_t n_vocab = m.hparams().n_vocab;
  const auto a = some_tokens(45, n_vocab, 1);
  auto b = a;
  for (size_t i = 40; i < b.size(); ++i) b[i] = (b[i] + 1) % static_cast<int32_t>(n_vocab);
  ThreadPool pool(2);
  Context fresh(m, 128, pool);
  const auto want = copy(fresh.decode(b, /*all_logits=*/true));

  Context ctx(m, 128, pool, 256, 2);
  ctx.decode(a);
  const int64_t reused = ctx.reuse_prefix(1, b);
  ASSERT_EQ(reused, 32);
  EXPECT_EQ(ctx.kv().blocks().n_used(), 3) << "two blocks shared, one of sequence 0's own";
  Batch rest;
  for (int64_t p = reused; p < 45; ++p) rest.add(b[p], static_cast<int32_t>(p), 1, true);
  const auto got = copy(ctx.decode_batch(rest));
  const std::vector<float> tail(want.begin() + reused * n_vocab, want.end());
  EXPECT_TRUE(same_bits(got, tail)) << "logits after a cached prefix differ from a full decode";

  // Sequence 0 goes on as if nothing was shared.
  Context alone(m, 128, pool);
  alone.decode(a);
  const int32_t next[1] = {7};
  const auto want0 = copy(alone.decode(next));
  Batch one;
  one.add(7, 45, 0, true);
  EXPECT_TRUE(same_bits(copy(ctx.decode_batch(one)), want0));
}

// A prompt decoded once, forked into two sequences that decode different tokens together.
void check_fork(const Model& m) {
  const int64_t n_vocab = m.hparams().n_vocab;
  const auto prompt = some_tokens(21, n_vocab, 2);  // ends inside a block: forks share it
  const auto g0 = some_tokens(3, n_vocab, 3), g1 = some_tokens(3, n_vocab, 4);
  ThreadPool pool(2);
  std::vector<std::vector<float>> want(2);
  for (int s = 0; s < 2; ++s) {
    Context c(m, 128, pool);
    c.decode(prompt);
    for (const int32_t t : s == 0 ? g0 : g1) {
      const int32_t one[1] = {t};
      const auto l = c.decode(one);
      want[s].insert(want[s].end(), l.begin(), l.end());
    }
  }
  Context ctx(m, 128, pool, 256, 2);
  ctx.decode(prompt);
  ctx.fork(0, 1);
  EXPECT_EQ(ctx.kv().blocks().n_used(), 2);
  std::vector<std::vector<float>> got(2);
  for (size_t i = 0; i < g0.size(); ++i) {
    Batch b;
    b.add(g0[i], static_cast<int32_t>(ctx.n_past(0)), 0, true);
    b.add(g1[i], static_cast<int32_t>(ctx.n_past(1)), 1, true);
    const auto l = ctx.decode_batch(b);
    got[0].insert(got[0].end(), l.begin(), l.begin() + n_vocab);
    got[1].insert(got[1].end(), l.begin() + n_vocab, l.end());
  }
  EXPECT_EQ(ctx.kv().blocks().n_used(), 3) << "the shared partial block was copied once";
  EXPECT_TRUE(same_bits(got[0], want[0])) << "sequence 0 after the fork";
  EXPECT_TRUE(same_bits(got[1], want[1])) << "the forked sequence";
}

TEST(KvSharing, PrefixReuseEqualsAFullDecodeTinyModel) {
  const std::string path = testing::temp_path("kv_sharing_tiny.gguf");
  testing::write_tiny_model(path, {});
  check_prefix_reuse(*Model::load(path));
}

TEST(KvSharing, PrefixReuseEqualsAFullDecodeSmolLM2) {
  SQUEEZE_REQUIRE_FILE(testing::default_model());
  check_prefix_reuse(*Model::load(testing::default_model()));
}

TEST(KvSharing, ForkedSequencesEqualEachAloneTinyModel) {
  const std::string path = testing::temp_path("kv_sharing_fork.gguf");
  testing::write_tiny_model(path, {});
  check_fork(*Model::load(path));
}

TEST(KvSharing, ForkedSequencesEqualEachAloneSmolLM2) {
  SQUEEZE_REQUIRE_FILE(testing::default_model());
  check_fork(*Model::load(testing::default_model()));
}

}  // namespace
}  // namespace squeeze::model
