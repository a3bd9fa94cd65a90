// kv::KvCache: rows stored as llama.cpp converts them and viewed per layer; the cells' metadata.
#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "random.h"

namespace squeeze::kv {
namespace {

TEST(KvCache, StoresHalvesPerLayerAndCell) {
  const int64_t n_layer = 3, row = 8, n_cells = 5;
  KvCache c(n_layer, row, n_cells);
  EXPECT_EQ(c.bytes(), 2u * n_layer * row * n_cells * sizeof(f16_t));
  const auto k = testing::randn(2 * row, 1), v = testing::randn(2 * row, 2);
  c.store(1, 3, 2, k.data(), v.data());  // layer 1, cells 3 and 4
  const ops::KvView view = c.view(1, 0, 5);
  EXPECT_EQ(view.n, 5);
  EXPECT_EQ(view.row_stride, row);
  for (int64_t t = 0; t < 2; ++t) {
    for (int64_t i = 0; i < row; ++i) {
      EXPECT_EQ(view.k[(3 + t) * row + i], f32_to_f16(k[t * row + i]));
      EXPECT_EQ(view.v[(3 + t) * row + i], f32_to_f16(v[t * row + i]));
    }
  }
  // The other layers are untouched.
  for (int64_t il : {0, 2}) {
    const ops::KvView other = c.view(il, 0, 5);
    for (int64_t i = 0; i < n_cells * row; ++i) EXPECT_EQ(other.k[i], f16_t{0});
  }
}

TEST(KvCache, CellsRecordPositionsAndSequences) {
  KvCache c(1, 4, 6);
  for (int64_t i = 0; i < 6; ++i) EXPECT_LT(c.cell(i).pos, 0) << "free at start";
  c.occupy(0, 4, 0, 7);
  c.occupy(4, 2, 10, 8);
  EXPECT_EQ(c.cell(2).pos, 2);
  EXPECT_EQ(c.cell(2).seq, 7);
  EXPECT_EQ(c.cell(5).pos, 11);
  EXPECT_EQ(c.cell(5).seq, 8);
  c.free_cells(3, 6);
  EXPECT_EQ(c.cell(2).pos, 2);
  for (int64_t i = 3; i < 6; ++i) EXPECT_LT(c.cell(i).pos, 0);
}

TEST(KvCache, SequencesOwnTheirCells) {
  KvCache c(2, 4, 3, 2);  // 2 sequences of 3 positions
  EXPECT_EQ(c.n_cells(), 6);
  EXPECT_EQ(c.cell_of(1, 2), 5);
  const std::vector<float> k = {1, 2, 3, 4}, v = {5, 6, 7, 8};
  c.store(1, c.cell_of(1, 0), 1, k.data(), v.data());
  const ops::KvView s1 = c.view(1, 1, 1), s0 = c.view(1, 0, 1);
  EXPECT_EQ(s1.k[3], f32_to_f16(4.0f));
  EXPECT_EQ(s1.v[0], f32_to_f16(5.0f));
  EXPECT_EQ(s0.k[3], f16_t{0});
}

TEST(KvCache, SizesMustBePositive) {
  EXPECT_THROW(KvCache(1, 4, 4, 0), UsageError);
  EXPECT_THROW(KvCache(0, 4, 4), UsageError);
  EXPECT_THROW(KvCache(1, 0, 4), UsageError);
  EXPECT_THROW(KvCache(1, 4, 0), UsageError);
  EXPECT_THROW(KvCache(1, 4, -3), UsageError);  // refused before anything is allocated
}

}  // namespace
}  // namespace squeeze::kv
