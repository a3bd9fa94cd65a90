// Token eviction: each policy keeps exactly its budget and the tokens it should on hand-made
// attention statistics; the cache's compaction moves rows and positions, copies shared blocks,
// and leaves the prefix index; bad options are clear errors.
#include "kv/evict.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache.h"

namespace squeeze::kv {
namespace {

EvictOptions opts(EvictPolicy p, int64_t budget, int64_t sinks = -1, int64_t recent = -1) {
  EvictOptions o;
  o.policy = p;
  o.budget = budget;
  o.sinks = sinks;
  o.recent = recent;
  return o;
}

std::vector<int32_t> range(int32_t a, int32_t b) {
  std::vector<int32_t> r(static_cast<size_t>(b - a));
  std::iota(r.begin(), r.end(), a);
  return r;
}

TEST(Evict, StreamingKeepsTheSinksAndTheNewest) {
  const std::vector<int32_t> kept = select_kept(opts(EvictPolicy::Streaming, 8), 20, {});
  std::vector<int32_t> want = range(0, 4);
  for (int32_t j = 16; j < 20; ++j) want.push_back(j);
  EXPECT_EQ(kept, want);
  // At or under the budget nothing goes.
  EXPECT_EQ(select_kept(opts(EvictPolicy::Streaming, 8), 8, {}), range(0, 8));
  // Fewer recent than the rest of the budget: the middle's newest fill it.
  EXPECT_EQ(select_kept(opts(EvictPolicy::Streaming, 6, 2, 2), 12, {}),
            (std::vector<int32_t>{0, 1, 8, 9, 10, 11}));
}

TEST(Evict, HeavyHittersAndRecentFillTheBudget) {
  // 16 tokens, two heavy hitters at 3 and 9, a tie at 5 and 6 (the earlier wins).
  std::vector<float> s(16, 0.1f);
  s[3] = 5;
  s[9] = 4;
  s[5] = s[6] = 2;
  s[14] = 9;  // in the recent window anyway
  const std::vector<int32_t> kept = select_kept(opts(EvictPolicy::H2O, 6), 16, s);
  EXPECT_EQ(kept, (std::vector<int32_t>{3, 5, 9, 13, 14, 15}));  // recent = budget / 2
  EXPECT_EQ(kept.size(), 6u);
  const std::vector<int32_t> k2 = select_kept(opts(EvictPolicy::H2O, 6, 1, 2), 16, s);
  EXPECT_EQ(k2, (std::vector<int32_t>{0, 3, 5, 9, 14, 15}));
}

TEST(Evict, A2sfDecaysAndWeighsByAge) {
  EvictOptions o = opts(EvictPolicy::A2SF, 4);
  o.alpha = 0.5;
  EvictScores s;
  s.reset(2, 8);
  std::fill(s.acc.begin(), s.acc.end(), 1.0f);
  std::vector<float> w;
  begin_chunk(o, s, 3, 2, w);  // 3 cached tokens decay by 0.5^2; the chunk's 2 queries 0.5, 1
  EXPECT_EQ(w, (std::vector<float>{0.5f, 1.0f}));
  EXPECT_FLOAT_EQ(s.slot(1)[2], 0.25f);
  EXPECT_FLOAT_EQ(s.slot(1)[3], 1.0f);  // not yet cached: untouched
}

TEST(Evict, SnapKvObservesTheLastQueriesAndPools) {
  EvictOptions o = opts(EvictPolicy::SnapKV, 6);
  o.window = 2;
  o.pool = 3;
  EvictScores s;
  s.reset(1, 10);
  std::fill(s.acc.begin(), s.acc.end(), 7.0f);
  std::vector<float> w;
  begin_chunk(o, s, 4, 5, w);  // a chunk of >= window queries clears the old statistics
  EXPECT_EQ(w, (std::vector<float>{0, 0, 0, 1, 1}));
  EXPECT_EQ(s.acc, std::vector<float>(10, 0.0f));
  std::fill(s.acc.begin(), s.acc.end(), 7.0f);
  begin_chunk(o, s, 9, 1, w);  // a decode step adds to them
  EXPECT_EQ(w, std::vector<float>{1});
  EXPECT_EQ(s.acc[0], 7.0f);
  // Max-pooling over 3 positions spreads a peak to its neighbours.
  std::fill(s.acc.begin(), s.acc.end(), 0.0f);
  s.acc[4] = 1;
  std::vector<float> scores;
  token_scores(o, s, 10, {}, scores);
  EXPECT_EQ(scores, (std::vector<float>{0, 0, 0, 1, 1, 1, 0, 0, 0, 0}));
  // The window's queries are the recent tokens kept; the pooled peak fills the rest.
  EXPECT_EQ(select_kept(o, 10, scores), (std::vector<int32_t>{0, 3, 4, 5, 8, 9}));
}

TEST(Evict, VatpWeighsAttentionByValueNorms) {
  const EvictOptions o = opts(EvictPolicy::VATP, 2, 0, 0);
  EvictScores s;
  s.reset(2, 4);
  // Slot 0 attends token 0, slot 1 token 1 a little less; token 1's values are far larger.
  s.slot(0)[0] = 1.0f;
  s.slot(1)[1] = 0.5f;
  const std::vector<float> norms = {1, 1, 1, 1, /*slot 1:*/ 1, 10, 1, 1};
  std::vector<float> scores;
  token_scores(o, s, 4, norms, scores);
  EXPECT_EQ(scores, (std::vector<float>{1, 5, 0, 0}));
  EXPECT_EQ(select_kept(o, 4, scores), (std::vector<int32_t>{0, 1}));
  // H2O on the same statistics ignores the norms.
  token_scores(opts(EvictPolicy::H2O, 2, 0, 0), s, 4, norms, scores);
  EXPECT_EQ(scores, (std::vector<float>{1, 0.5f, 0, 0}));
}

TEST(Evict, CompactMovesTheStatistics) {
  EvictScores s;
  s.reset(2, 5);
  for (size_t i = 0; i < s.acc.size(); ++i) s.acc[i] = static_cast<float>(i);
  compact(s, std::vector<int32_t>{1, 3});
  EXPECT_EQ(s.acc, (std::vector<float>{1, 3, 0, 0, 0, 6, 8, 0, 0, 0}));
}

TEST(Evict, BadOptionsAreClearErrors) {
  EXPECT_THROW(parse_evict_policy("lru"), UsageError);
  EXPECT_EQ(parse_evict_policy("snapkv"), EvictPolicy::SnapKV);
  EXPECT_EQ(evict_policy_name(EvictPolicy::A2SF), "a2sf");
  EXPECT_EQ(parse_evict_policy("keyformer"), EvictPolicy::Keyformer);
  EXPECT_THROW(check_evict_options(opts(EvictPolicy::H2O, 0)), UsageError);
  EXPECT_THROW(check_evict_options(opts(EvictPolicy::H2O, 8, 4, 5)), UsageError);
  EvictOptions o = opts(EvictPolicy::SnapKV, 64);
  o.pool = 4;
  EXPECT_THROW(check_evict_options(o), UsageError);
  o.pool = 7;
  o.window = 0;
  EXPECT_THROW(check_evict_options(o), UsageError);
  o = opts(EvictPolicy::A2SF, 64);
  o.alpha = 1.5;
  EXPECT_THROW(check_evict_options(o), UsageError);
  o = opts(EvictPolicy::Keyformer, 64);
  o.tau = 0;
  EXPECT_THROW(check_evict_options(o), UsageError);
  o.tau = 2;
  EXPECT_EQ(describe(o), "keyformer (budget 64, sinks 0, recent 32, tau 2)");
  o.tau_end = -1;
  EXPECT_THROW(check_evict_options(o), UsageError);
  o.tau_end = 3;
  EXPECT_NO_THROW(check_evict_options(o));
  EXPECT_EQ(describe(o), "keyformer (budget 64, sinks 0, recent 32, tau 2 to 3)");
  EXPECT_NO_THROW(check_evict_options(opts(EvictPolicy::Streaming, 64)));
  EXPECT_EQ(describe(opts(EvictPolicy::Streaming, 64)), "streaming (budget 64, sinks 4, recent 60)");
  EXPECT_EQ(evict_capacity(opts(EvictPolicy::H2O, 1000), 8192, 256, 2), 2 * (1000 + 256 + 64));
  EXPECT_EQ(evict_capacity(opts(EvictPolicy::H2O, 8000), 8192, 256, 1), 0);
}

// A cache of one layer whose row i of K holds i + 0.25 and of V -i (exact in half).
void fill(KvCache& kv, int64_t seq, int64_t n) {
  ASSERT_TRUE(kv.prepare(seq, n));
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = kv.seq_len(seq) + i;
    std::vector<float> k(static_cast<size_t>(kv.row()), static_cast<float>(p) + 0.25f);
    std::vector<float> v(static_cast<size_t>(kv.row()), -static_cast<float>(p));
    kv.store(0, kv.cell(seq, p), k.data(), v.data());
    tokens.push_back(static_cast<int32_t>(100 + p));
  }
  kv.commit(seq, tokens);
}

TEST(EvictCache, CompactionMovesRowsAndPositions) {
  KvCache kv(1, 4, 64, 2);
  fill(kv, 0, 40);
  const std::vector<int32_t> kept = {0, 1, 2, 3, 20, 33, 39};
  kv.evict(0, kept);
  EXPECT_EQ(kv.seq_len(0), 7);
  EXPECT_EQ(kv.seq_pos(0), 40);
  std::vector<int32_t> cells;
  kv.cells(0, 7, cells);
  const ops::KvView view = kv.view(0, cells);
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(kv.cell_pos(cells[i]), kept[i]);
    EXPECT_EQ(kv.cell_token(cells[i]), 100 + kept[i]);
    EXPECT_EQ(f16_to_f32(view.k[cells[i] * 4 + 3]), static_cast<float>(kept[i]) + 0.25f);
    EXPECT_EQ(f16_to_f32(view.v[cells[i] * 4]), -static_cast<float>(kept[i]));
  }
  EXPECT_EQ(kv.blocks().n_used(), 1);  // 7 tokens: one block of 16
  // New tokens take the next positions.
  ASSERT_TRUE(kv.prepare(0, 2));
  kv.commit(0, std::vector<int32_t>{7, 8});
  EXPECT_EQ(kv.cell_pos(kv.cell(0, 8)), 41);
  // Truncating by position keeps the tokens below it; the next token takes that position.
  kv.truncate(0, 34);
  EXPECT_EQ(kv.seq_len(0), 6);
  EXPECT_EQ(kv.seq_pos(0), 34);
  kv.truncate(0, 0);
  EXPECT_EQ(kv.seq_pos(0), 0);
}

TEST(EvictCache, SharedBlocksAreCopiedAndLeaveThePrefixIndex) {
  KvCache kv(1, 4, 128, 2);
  fill(kv, 0, 48);
  kv.fork(0, 1);
  kv.evict(1, std::vector<int32_t>{0, 17, 47});
  std::vector<int32_t> c0, c1;
  kv.cells(0, 48, c0);
  kv.cells(1, 3, c1);
  EXPECT_NE(c0[0] / 16, c1[0] / 16);  // sequence 1 wrote a copy of its first block
  EXPECT_EQ(kv.cell_pos(c0[1]), 1);   // sequence 0 is as it was
  EXPECT_EQ(kv.cell_pos(c1[1]), 17);
  // Sequence 1's block is not offered as a prefix; sequence 0's still are.
  EXPECT_FALSE(kv.blocks().published(c1[0] / 16));
  EXPECT_TRUE(kv.blocks().published(c0[0] / 16));
  kv.truncate(0, 0);
  EXPECT_EQ(kv.reuse_prefix(0, range(100, 148)), 32);
  // Nor are the blocks it fills after an eviction.
  fill(kv, 1, 40);
  kv.cells(1, 43, c1);
  EXPECT_FALSE(kv.blocks().published(c1[16] / 16));
}

TEST(EvictCache, QuantizedCachesAndBadIndicesAreRefused) {
  KvCache q(1, 64, 128, 1, {KvType::Q4, KeyAxis::Channel, 64, 0, 0});
  EXPECT_THROW(q.evict(0, std::vector<int32_t>{}), UsageError);
  KvCache kv(1, 4, 64, 1);
  fill(kv, 0, 10);
  EXPECT_THROW(kv.evict(0, std::vector<int32_t>{3, 2}), UsageError);
  EXPECT_THROW(kv.evict(0, std::vector<int32_t>{10}), UsageError);
}

}  // namespace
}  // namespace squeeze::kv
