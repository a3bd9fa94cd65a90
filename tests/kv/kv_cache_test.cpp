// kv::KvCache and kv::BlockAllocator: rows stored as llama.cpp converts them, blocks allocated,
// shared, copied on write and released; the prefix index, its verification and its LRU.
#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"
#include "random.h"

namespace squeeze::kv {
namespace {

std::vector<int32_t> iota(int64_t n, int32_t first = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// Appends tokens to seq, writing row value `tag + position` into every layer's K and V.
void append(KvCache& c, int64_t seq, const std::vector<int32_t>& tokens, float tag) {
  ASSERT_TRUE(c.prepare(seq, static_cast<int64_t>(tokens.size())));
  const int64_t len = c.seq_len(seq);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<float> row(static_cast<size_t>(c.row()), tag + static_cast<float>(len + i));
    for (int64_t il = 0; il < c.n_layer(); ++il) {
      c.store(il, c.cell(seq, len + static_cast<int64_t>(i)), row.data(), row.data());
    }
  }
  c.commit(seq, tokens);
}

// The K value of seq's position pos in layer il (column 0).
float k_at(const KvCache& c, int64_t seq, int64_t pos, int64_t il = 0) {
  std::vector<int32_t> cells;
  c.cells(seq, pos + 1, cells);
  const ops::KvView v = c.view(il, cells);
  return f16_to_f32(v.k[v.cells[pos] * v.row_stride]);
}

TEST(BlockAllocator, AllocatesReleasesAndRunsOut) {
  BlockAllocator a(3);
  EXPECT_EQ(a.n_available(), 3);
  const int32_t b0 = a.allocate(), b1 = a.allocate(), b2 = a.allocate();
  EXPECT_EQ(b0, 0);
  EXPECT_EQ(b1, 1);
  EXPECT_EQ(b2, 2);
  EXPECT_EQ(a.allocate(), -1) << "exhausted";
  EXPECT_EQ(a.n_used(), 3);
  a.retain(b1);
  a.release(b1);
  EXPECT_EQ(a.n_available(), 0) << "still referenced once";
  a.release(b1);
  EXPECT_EQ(a.n_available(), 1);
  EXPECT_EQ(a.allocate(), b1);
}

TEST(BlockAllocator, IdleCachedBlocksAreEvictedOldestFirst) {
  BlockAllocator a(3);
  const int32_t b0 = a.allocate(), b1 = a.allocate(), b2 = a.allocate();
  ASSERT_TRUE(a.publish(b0, 100));
  ASSERT_TRUE(a.publish(b1, 101));
  EXPECT_FALSE(a.publish(b2, 100)) << "the hash is taken";
  a.release(b1);  // idle, cached
  a.release(b0);  // idle, cached, released later
  EXPECT_EQ(a.n_cached_idle(), 2);
  EXPECT_EQ(a.find(101), b1);
  a.retain(b0);  // taken back from the cache
  EXPECT_EQ(a.n_cached_idle(), 1);
  a.release(b0);  // now b0 is the most recent release: b1 goes first
  EXPECT_EQ(a.allocate(), b1);
  EXPECT_EQ(a.find(101), -1) << "evicted from the index";
  EXPECT_EQ(a.find(100), b0);
  EXPECT_EQ(a.allocate(), b0);
  EXPECT_EQ(a.allocate(), -1);
}

TEST(KvCache, StoresHalvesInBlocksAndViewsThemByCells) {
  const int64_t n_layer = 3, row = 8;
  KvCache c(n_layer, row, 40, 2);  // 40 tokens: 3 blocks of 16
  EXPECT_EQ(c.n_blocks(), 3);
  EXPECT_EQ(c.capacity(), 48);
  EXPECT_EQ(c.bytes(), 2u * n_layer * row * 48 * sizeof(f16_t));
  EXPECT_EQ(c.bytes_per_token(), 2u * n_layer * row * sizeof(f16_t));
  ASSERT_TRUE(c.prepare(1, 2));
  const auto k = testing::randn(2 * row, 1), v = testing::randn(2 * row, 2);
  for (int64_t t = 0; t < 2; ++t) c.store(1, c.cell(1, t), k.data() + t * row, v.data() + t * row);
  c.commit(1, std::vector<int32_t>{7, 8});
  EXPECT_EQ(c.seq_len(1), 2);
  EXPECT_EQ(c.seq_len(0), 0);
  std::vector<int32_t> cells;
  c.cells(1, 2, cells);
  const ops::KvView view = c.view(1, cells);
  EXPECT_EQ(view.n(), 2);
  for (int64_t t = 0; t < 2; ++t) {
    EXPECT_EQ(c.cell_pos(cells[t]), t);
    EXPECT_EQ(c.cell_token(cells[t]), 7 + t);
    for (int64_t i = 0; i < row; ++i) {
      EXPECT_EQ(view.k[cells[t] * row + i], f32_to_f16(k[t * row + i]));
      EXPECT_EQ(view.v[cells[t] * row + i], f32_to_f16(v[t * row + i]));
    }
  }
  const ops::KvView other = c.view(0, cells);  // another layer: untouched
  for (int64_t i = 0; i < row; ++i) EXPECT_EQ(other.k[cells[0] * row + i], f16_t{0});
}

TEST(KvCache, SequencesTakeBlocksAsTheyGrowUntilNoneIsLeft) {
  KvCache c(1, 4, 64, 2);  // 4 blocks
  append(c, 0, iota(17), 0);  // 2 blocks
  EXPECT_EQ(c.blocks().n_used(), 2);
  EXPECT_EQ(c.blocks_needed(0, 15), 0) << "room left in the second block";
  EXPECT_EQ(c.blocks_needed(0, 16), 1);
  append(c, 1, iota(32, 100), 1000);  // 2 blocks: the cache is full
  EXPECT_EQ(c.blocks().n_available(), 0);
  EXPECT_FALSE(c.prepare(0, 16));
  EXPECT_EQ(c.seq_len(0), 17) << "a failed prepare changes nothing";
  EXPECT_TRUE(c.prepare(0, 15));
  EXPECT_EQ(k_at(c, 1, 31), 1031.0f);
  c.truncate(1, 10);  // releases the second block of sequence 1
  EXPECT_EQ(c.seq_len(1), 10);
  EXPECT_EQ(c.blocks().n_available(), 1);
  EXPECT_TRUE(c.prepare(0, 16));
  c.truncate(0, 0);
  c.truncate(1, 0);
  EXPECT_EQ(c.blocks().n_used(), 0);
}

TEST(KvCache, ForkSharesBlocksAndCopiesOneBeforeWritingIt) {
  KvCache c(2, 4, 64, 3);
  append(c, 0, iota(20), 0);  // a full block and 4 positions of the second
  c.fork(0, 1);
  EXPECT_EQ(c.seq_len(1), 20);
  EXPECT_EQ(c.blocks().n_used(), 2) << "shared, not copied";
  EXPECT_EQ(c.blocks().refs(c.cell(0, 0) / kBlockTokens), 2);
  EXPECT_EQ(c.blocks_needed(1, 1), 1) << "the shared partial block must be copied";
  append(c, 1, {50}, 2000);  // copy-on-write
  EXPECT_EQ(c.blocks().n_used(), 3);
  EXPECT_EQ(c.cell(0, 0), c.cell(1, 0)) << "the full block stays shared";
  EXPECT_NE(c.cell(0, 19), c.cell(1, 19));
  for (int64_t il = 0; il < 2; ++il) {
    EXPECT_EQ(k_at(c, 1, 19, il), 19.0f) << "copied rows, every layer";
    EXPECT_EQ(k_at(c, 1, 20, il), 2020.0f);
  }
  append(c, 0, {60}, 3000);  // the original goes on in its own block
  EXPECT_EQ(k_at(c, 0, 20), 3020.0f);
  EXPECT_EQ(k_at(c, 1, 20), 2020.0f);
  EXPECT_EQ(c.cell_token(c.cell(1, 20)), 50);
  EXPECT_EQ(c.cell_token(c.cell(1, 3)), 3);
  c.truncate(0, 0);
  c.truncate(1, 0);
  EXPECT_EQ(c.blocks().n_used(), 0);
}

TEST(KvCache, ReusesTheLongestIndexedPrefixAndLeavesATokenToDecode) {
  KvCache c(1, 4, 160, 2);
  const auto prompt = iota(40, 500);  // two full blocks and 8 tokens
  append(c, 0, prompt, 0);
  EXPECT_TRUE(c.blocks().published(c.cell(0, 0) / kBlockTokens));
  EXPECT_FALSE(c.blocks().published(c.cell(0, 39) / kBlockTokens)) << "partial: not indexed";
  auto other = prompt;
  other[20] = 9;  // differs in the second block
  EXPECT_EQ(c.reuse_prefix(1, other), 16);
  EXPECT_EQ(c.cell(1, 15), c.cell(0, 15));
  EXPECT_EQ(k_at(c, 1, 15), 15.0f);
  c.truncate(1, 0);
  EXPECT_EQ(c.reuse_prefix(1, prompt), 32);
  c.truncate(1, 0);
  // A prompt of exactly two blocks keeps its last block to decode (logits are wanted).
  EXPECT_EQ(c.reuse_prefix(1, std::vector<int32_t>(prompt.begin(), prompt.begin() + 32)), 16);
  c.truncate(1, 0);
  // Two tokens left at least (the scheduler's choice): a prompt of two blocks and one token
  // keeps its second block to compute.
  EXPECT_EQ(c.reuse_prefix(1, std::vector<int32_t>(prompt.begin(), prompt.begin() + 33), 2), 16);
  c.truncate(1, 0);
  EXPECT_EQ(c.reuse_prefix(1, std::vector<int32_t>(prompt.begin(), prompt.begin() + 33)), 32);
  c.truncate(1, 0);
  EXPECT_EQ(c.reuse_prefix(1, std::vector<int32_t>(prompt.begin(), prompt.begin() + 1), 2), 0);
  EXPECT_THROW(c.reuse_prefix(1, prompt, 0), UsageError);
  EXPECT_EQ(c.reuse_prefix(1, iota(40, 7)), 0);
  // Released, the blocks stay cached and are taken back.
  c.truncate(0, 0);
  EXPECT_EQ(c.blocks().n_cached_idle(), 2);
  EXPECT_EQ(c.reuse_prefix(1, prompt), 32);
  EXPECT_EQ(c.blocks().n_cached_idle(), 0);
  EXPECT_THROW(c.reuse_prefix(1, prompt), UsageError) << "only into an empty sequence";
}

TEST(KvCache, AWrittenBlockLeavesTheIndexAndEvictionForgetsIt) {
  KvCache c(1, 4, 48, 2);  // 3 blocks
  const auto prompt = iota(33, 500);
  append(c, 0, prompt, 0);  // 3 blocks, two indexed
  c.truncate(0, 20);        // back into the second block: it is rewritten from position 20
  append(c, 0, {1, 2, 3}, 100);
  c.truncate(0, 0);
  EXPECT_EQ(c.reuse_prefix(1, prompt), 16) << "the second block changed: no longer indexed";
  c.truncate(1, 0);
  // Three new blocks evict the idle cached one.
  append(c, 1, iota(48, 9000), 0);
  EXPECT_EQ(c.blocks().n_cached_idle(), 0);
  c.truncate(1, 0);
  EXPECT_EQ(c.reuse_prefix(0, prompt), 0);
}

TEST(KvCache, SizesMustBePositive) {
  EXPECT_THROW(KvCache(1, 4, 4, 0), UsageError);
  EXPECT_THROW(KvCache(0, 4, 4), UsageError);
  EXPECT_THROW(KvCache(1, 0, 4), UsageError);
  EXPECT_THROW(KvCache(1, 4, 0), UsageError);
  EXPECT_THROW(KvCache(1, 4, -3), UsageError);  // refused before anything is allocated
  KvCache c(1, 4, 16);
  EXPECT_THROW(c.seq_len(1), UsageError);
}

}  // namespace
}  // namespace squeeze::kv
