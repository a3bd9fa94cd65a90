// Quantized KV storage (kv/kv_quant.h and a quantized kv::KvCache): codes round trip within
// half a step per group and axis; sinks, the recent window and unfinished blocks stay exact;
// frozen blocks survive forks, copies and truncation; bad options are clear errors.
#include "kv/kv_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "random.h"

namespace squeeze::kv {
namespace {

float step(const QuantParams& p) { return f16_to_f32(p.scale); }

// |x - dequantized| <= half a step, plus the half rounding of the result and of the minimum.
void expect_within_half_step(float x, f16_t got, const QuantParams& p) {
  const float tol = 0.5f * step(p) + std::abs(x) * 2e-3f + 1e-6f;
  EXPECT_NEAR(f16_to_f32(got), x, tol);
}

TEST(KvQuant, RowGroupsRoundTripWithinHalfAStep) {
  for (const int bits : {8, 4, 2}) {
    const int64_t width = 192, group = 32;
    std::vector<float> x = testing::randn(width, 7, 3.0f);
    std::fill_n(x.begin() + 64, group, 1.25f);  // a constant group is exact
    std::vector<uint8_t> codes(packed_bytes(width, bits));
    std::vector<QuantParams> params(width / group);
    quantize_row_groups(x.data(), width, group, bits, codes.data(), params.data());
    std::vector<f16_t> back(width);
    dequantize_row(codes.data(), params.data(), width, group, bits, back.data());
    for (int64_t c = 0; c < width; ++c) expect_within_half_step(x[c], back[c], params[c / group]);
    for (int64_t c = 64; c < 64 + group; ++c) EXPECT_EQ(f16_to_f32(back[c]), 1.25f);
    // The step is the group's range over 2^bits - 1 levels.
    const auto [lo, hi] = std::minmax_element(x.begin(), x.begin() + group);
    EXPECT_NEAR(step(params[0]), (*hi - *lo) / static_cast<float>((1 << bits) - 1),
                (*hi - *lo) * 2e-3f);
  }
}

TEST(KvQuant, ColumnsRoundTripWithinTheirOwnStep) {
  const int64_t rows = 64, width = 48;
  std::vector<float> x = testing::randn(rows * width, 9);
  // Channel 5 is an outlier channel: a large scale there must not coarsen the others.
  for (int64_t r = 0; r < rows; ++r) x[r * width + 5] *= 100.0f;
  for (const int bits : {8, 4, 2}) {
    std::vector<uint8_t> codes(packed_bytes(rows, bits) * width);
    std::vector<QuantParams> params(width);
    quantize_columns(x.data(), rows, width, bits, codes.data(), params.data());
    std::vector<f16_t> back(width);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_column_row(codes.data(), params.data(), rows, width, bits, r, back.data());
      for (int64_t c = 0; c < width; ++c) expect_within_half_step(x[r * width + c], back[c], params[c]);
    }
    EXPECT_GT(step(params[5]), 20 * step(params[4]));
  }
}

TEST(KvQuant, OptionsNamesAndChecks) {
  EXPECT_EQ(parse_kv_type("q4"), KvType::Q4);
  EXPECT_EQ(kv_type_name(KvType::Q2), "q2");
  EXPECT_EQ(kv_bits(KvType::Q8), 8);
  EXPECT_THROW(parse_kv_type("q5"), UsageError);
  EXPECT_THROW(parse_key_axis("head"), UsageError);
  KvOptions o;
  o.type = KvType::Q4;
  o.group = 48;
  EXPECT_THROW(check_kv_options(o, 192 + 32), UsageError);  // 48 does not divide 224
  EXPECT_NO_THROW(check_kv_options(o, 192));
  o.recent = -1;
  EXPECT_THROW(check_kv_options(o, 192), UsageError);
  EXPECT_THROW(KvCache(2, 224, 128, 1, {KvType::Q4, KeyAxis::Channel, 48, 0, 0}), UsageError);
  EXPECT_EQ(block_tokens({KvType::Q4, KeyAxis::Channel, 32, 0, 0}), 32);
  EXPECT_EQ(block_tokens({KvType::Q4, KeyAxis::Token, 32, 0, 0}), 16);
  EXPECT_EQ(block_tokens({}), 16);
}

// Dense-and-sparse: planted outliers are the entries taken, each group's range closes over the
// rest, taken entries are clamped into it, every group keeps two entries.
TEST(KvQuant, TakeOutliersTakesTheEntriesThatWidenTheirGroups) {
  const int64_t rows = 16, width = 24, group = 8;
  const std::vector<float> base = testing::randn(rows * width, 31);
  const std::vector<int64_t> planted = {3 * width + 5, 7 * width + 5, 11 * width + 20};  // ascending
  for (const bool by_column : {true, false}) {
    std::vector<float> x = base;
    x[planted[0]] = 40.0f;
    x[planted[1]] = -35.0f;
    x[planted[2]] = 25.0f;
    std::vector<Outlier> out(3);
    std::vector<float> original(3);
    ASSERT_EQ(take_outliers(x.data(), rows, width, group, by_column, 3, out.data(), original.data()), 3);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(out[i].t * width + out[i].c, planted[i]) << by_column << " " << i;
      EXPECT_EQ(original[i], (std::vector<float>{40.0f, -35.0f, 25.0f})[i]);
      EXPECT_LT(std::abs(x[planted[i]]), 5.0f);  // clamped into the range of its group's others
    }
    // Every other entry unchanged.
    for (int64_t e = 0; e < rows * width; ++e) {
      if (std::find(planted.begin(), planted.end(), e) == planted.end()) {
        EXPECT_EQ(x[e], base[e]);
      }
    }
  }
  // Asked for everything: each group is left its two extremes.
  std::vector<float> x = base;
  std::vector<Outlier> out(rows * width);
  std::vector<float> original(out.size());
  EXPECT_EQ(take_outliers(x.data(), rows, width, group, true, rows * width, out.data(), original.data()),
            (rows - 2) * width);
  EXPECT_EQ(take_outliers(x.data(), rows, width, group, false, rows * width, out.data(), original.data()),
            rows * (width / group) * (group - 2));
  EXPECT_TRUE(std::is_sorted(out.begin(), out.begin() + rows * (width / group) * (group - 2),
                             [](const Outlier& a, const Outlier& b) { return a.c * 1000 + a.t < b.c * 1000 + b.t; }));
}

constexpr int64_t kLayers = 2, kRow = 64;

// Deterministic K and V rows of position p, layer il.
std::vector<float> row_of(int64_t il, int64_t p, int kv) {
  return testing::randn(kRow, static_cast<uint32_t>(1000 * il + 2 * p + kv + 1));
}

void append(KvCache& c, int64_t seq, int64_t n) {
  ASSERT_TRUE(c.prepare(seq, n));
  const int64_t len = c.seq_len(seq);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<int32_t>(len + i);
    for (int64_t il = 0; il < kLayers; ++il) {
      c.store(il, c.cell(seq, len + i), row_of(il, len + i, 0).data(), row_of(il, len + i, 1).data());
    }
  }
  c.commit(seq, tokens);
}

// Layer il of seq, positions 0..len-1, read as attention reads it: ([len, row] K, V) as floats.
std::pair<std::vector<float>, std::vector<float>> rows(const KvCache& c, int64_t seq, int64_t il) {
  ThreadPool pool(2);
  std::vector<int32_t> cells;
  c.cells(seq, c.seq_len(seq), cells);
  KvRows scratch;
  const ops::KvView v = c.read(il, cells, scratch, pool);
  std::vector<float> k(static_cast<size_t>(v.n() * kRow)), val(k.size());
  for (int64_t j = 0; j < v.n(); ++j) {
    for (int64_t i = 0; i < kRow; ++i) {
      k[j * kRow + i] = f16_to_f32(v.k[v.cells[j] * v.row_stride + i]);
      val[j * kRow + i] = f16_to_f32(v.v[v.cells[j] * v.row_stride + i]);
    }
  }
  return {k, val};
}

float max_error(const std::vector<float>& got, int64_t il, int64_t p0, int64_t p1, int kv) {
  float e = 0;
  for (int64_t p = p0; p < p1; ++p) {
    const std::vector<float> want = row_of(il, p, kv);
    for (int64_t i = 0; i < kRow; ++i) e = std::max(e, std::abs(got[p * kRow + i] - want[i]));
  }
  return e;
}

// The largest error half-float storage makes on these rows.
constexpr float kHalfError = 4e-3f;

TEST(KvCacheQuantized, SinksAndTheRecentWindowStayExactOlderBlocksAreCodes) {
  // Blocks of 16 tokens; sinks 10 (block 0), recent 40: at length 100, blocks 1..2 (positions
  // 16..47, all before 60) are frozen; blocks 3..6 hold the recent window and the unfinished block.
  for (const KvType type : {KvType::Q8, KvType::Q4, KvType::Q2}) {
    KvCache c(kLayers, kRow, 256, 1, {type, KeyAxis::Channel, 16, 40, 10});
    append(c, 0, 70);
    append(c, 0, 30);
    std::vector<int32_t> cells;
    c.cells(0, 100, cells);
    for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(c.frozen(cells[i * 16] / 16), i == 1 || i == 2) << i;
    EXPECT_EQ(c.n_hot_blocks(), 5);
    const float coarse = type == KvType::Q8 ? 0.05f : type == KvType::Q4 ? 0.8f : 3.0f;
    for (int64_t il = 0; il < kLayers; ++il) {
      const auto [k, v] = rows(c, 0, il);
      for (int kv = 0; kv < 2; ++kv) {
        const std::vector<float>& got = kv == 0 ? k : v;
        EXPECT_LE(max_error(got, il, 0, 16, kv), kHalfError);
        EXPECT_LE(max_error(got, il, 48, 100, kv), kHalfError);
        const float e = max_error(got, il, 16, 48, kv);
        EXPECT_GT(e, kHalfError);  // really codes
        EXPECT_LE(e, coarse);
      }
    }
  }
}

// --kv-outliers: planted outliers of frozen blocks come back exact (to half), and the codes of
// the rest are finer than without them, for keys per channel and per token, read() and decode.
TEST(KvCacheQuantized, OutliersStayExactAndNarrowTheCodes) {
  for (const KeyAxis axis : {KeyAxis::Channel, KeyAxis::Token}) {
    // Rows with outliers: every 5th position has a large entry in a column that moves.
    auto planted = [](int64_t p) { return p % 5 == 0 ? (p * 7) % kRow : -1; };
    auto row = [&](int64_t il, int64_t p, int kv) {
      std::vector<float> r = row_of(il, p, kv);
      if (const int64_t c = planted(p); c >= 0) r[c] = (p % 2 ? 30.0f : -30.0f) + 0.25f * kv;
      return r;
    };
    float err[2] = {};
    for (const double outliers : {0.0, 0.02}) {
      KvCache c(kLayers, kRow, 256, 1, {KvType::Q4, axis, 16, 0, 0, outliers});
      ASSERT_TRUE(c.prepare(0, 96));
      std::vector<int32_t> tokens(96, 1);
      for (int64_t p = 0; p < 96; ++p) {
        for (int64_t il = 0; il < kLayers; ++il) c.store(il, c.cell(0, p), row(il, p, 0).data(), row(il, p, 1).data());
      }
      c.commit(0, tokens);
      for (int64_t il = 0; il < kLayers; ++il) {
        const auto [k, v] = rows(c, 0, il);
        for (int64_t p = 0; p < 80; ++p) {  // blocks 0..4 are frozen
          for (int kv = 0; kv < 2; ++kv) {
            const std::vector<float> want = row(il, p, kv);
            for (int64_t i = 0; i < kRow; ++i) {
              const float got = (kv == 0 ? k : v)[p * kRow + i];
              if (outliers > 0 && i == planted(p)) {
                EXPECT_NEAR(got, want[i], 0.02f) << describe(c.options()) << " " << p;
              } else if (i != planted(p)) {
                err[outliers > 0] = std::max(err[outliers > 0], std::abs(got - want[i]));
              }
            }
          }
        }
      }
      EXPECT_EQ(c.bytes_per_token(), KvCache(kLayers, kRow, 256, 1, {KvType::Q4, axis, 16, 0, 0}).bytes_per_token() +
                                         (outliers > 0 ? kLayers * 2 * outlier_count(c.options(), 16, kRow) * 6 / 16 : 0));
    }
    EXPECT_LT(err[1], 0.5f * err[0]) << (axis == KeyAxis::Channel ? "channel" : "token");
  }
  KvOptions o{KvType::Q4, KeyAxis::Channel, 16, 0, 0, 0.6};
  EXPECT_THROW(check_kv_options(o, kRow), UsageError);
  o.outliers = 0.01;
  EXPECT_NE(describe(o).find("outliers 0.01"), std::string::npos);
}

// --kv-k-prerope: keys whose channels keep their scale before RoPE (a bias per channel, as real
// keys have) and swing with the rotation after it come back closer quantized before RoPE; a
// cache that freezes keys before RoPE without the rotation is an error.
TEST(KvCacheQuantized, KeysBeforeRopeComeBackCloser) {
  const ops::Rope rope(32, 10000.0f, ops::RopeLayout::Neox);
  const std::vector<float> bias = testing::randn(kRow, 77, 4.0f);
  auto key = [&](int64_t p) {
    std::vector<float> k = testing::randn(kRow, static_cast<uint32_t>(500 + p), 0.3f);
    for (int64_t i = 0; i < kRow; ++i) k[i] += bias[i];
    rope.apply(k.data(), kRow / 32, 32, p);
    return k;
  };
  float err[2] = {};
  for (const bool prerope : {false, true}) {
    KvOptions o{KvType::Q4, KeyAxis::Channel, 16, 0, 0};
    o.k_prerope = prerope;
    KvCache c(kLayers, kRow, 256, 1, o);
    if (prerope) c.set_key_rope({rope, rope}, 32);
    ASSERT_TRUE(c.prepare(0, 64));
    for (int64_t p = 0; p < 64; ++p) {
      for (int64_t il = 0; il < kLayers; ++il) c.store(il, c.cell(0, p), key(p).data(), row_of(il, p, 1).data());
    }
    c.commit(0, std::vector<int32_t>(64, 1));
    EXPECT_TRUE(c.frozen(0));
    for (int64_t il = 0; il < kLayers; ++il) {
      const std::vector<float> k = rows(c, 0, il).first;
      for (int64_t p = 0; p < 64; ++p) {
        const std::vector<float> want = key(p);
        for (int64_t i = 0; i < kRow; ++i) err[prerope] = std::max(err[prerope], std::abs(k[p * kRow + i] - want[i]));
      }
    }
  }
  EXPECT_LT(err[1], 0.5f * err[0]);
  KvOptions o{KvType::Q4, KeyAxis::Channel, 16, 0, 0};
  o.k_prerope = true;
  KvCache c(kLayers, kRow, 256, 1, o);
  ASSERT_TRUE(c.prepare(0, 16));
  EXPECT_THROW(c.commit(0, std::vector<int32_t>(16, 1)), Error);
  EXPECT_NE(describe(o).find("channel before RoPE"), std::string::npos);
}

TEST(KvCacheQuantized, CodesTakeTheirShareOfTheBytes) {
  // Keys per channel over blocks of 64 tokens, values per token in groups of 64: 4 bits and a
  // half scale and minimum per 64 values.
  const KvCache f16(30, 192, 8192);
  const KvCache q4(30, 192, 8192, 1, {KvType::Q4, KeyAxis::Channel, 64, 128, 0});
  const KvCache q2(30, 192, 8192, 1, {KvType::Q2, KeyAxis::Channel, 64, 128, 0});
  EXPECT_EQ(q4.bytes_per_token(), 30u * 192 * 2 * (4 + 32.0 / 64) / 8);
  EXPECT_GT(static_cast<double>(f16.bytes_per_token()) / static_cast<double>(q4.bytes_per_token()), 3.5);
  EXPECT_GT(static_cast<double>(f16.bytes_per_token()) / static_cast<double>(q2.bytes_per_token()), 6.0);
  EXPECT_GT(static_cast<double>(f16.bytes()) / static_cast<double>(q4.bytes()), 3.5);
}

TEST(KvCacheQuantized, PerTokenKeysForkCopyAndTruncate) {
  KvCache c(kLayers, kRow, 512, 2, {KvType::Q4, KeyAxis::Token, 16, 16, 0});
  append(c, 0, 80);  // blocks 0..3 frozen (positions < 64)
  const auto [k0, v0] = rows(c, 0, 1);
  c.fork(0, 1);
  append(c, 1, 5);  // writes a copy of the shared unfinished block
  const auto [k1, v1] = rows(c, 1, 1);
  EXPECT_TRUE(std::equal(k0.begin(), k0.end(), k1.begin()));
  EXPECT_TRUE(std::equal(v0.begin(), v0.end(), v1.begin()));
  EXPECT_LE(max_error(k1, 1, 64, 85, 0), kHalfError);
  // Truncated into a frozen block and written again: the kept rows are what the codes held.
  c.truncate(0, 40);
  append(c, 0, 4);
  const auto [k2, v2] = rows(c, 0, 1);
  EXPECT_TRUE(std::equal(k2.begin(), k2.begin() + 40 * kRow, k0.begin()));
  EXPECT_LE(max_error(k2, 1, 40, 44, 0), kHalfError);
  EXPECT_THROW(c.view(0, {}), UsageError);
}

// Sizing by memory: sequences filling their share of the tokens, in steps of the batch, never
// take more than the bytes given; a released sequence leaves no half rows behind (its full
// blocks stay in the prefix index as codes).
TEST(KvCacheQuantized, TokensForMemoryStayWithinTheBytes) {
  const size_t budget = 1 << 20;
  for (const KvOptions o : {KvOptions{}, KvOptions{KvType::Q4, KeyAxis::Channel, 32, 64, 0},
                            KvOptions{KvType::Q4, KeyAxis::Channel, 32, 0, 32}}) {
    const int64_t n_seq = 3, batch = 48;
    const int64_t tokens = tokens_for_memory(o, kLayers, kRow, budget, n_seq, batch);
    ASSERT_GT(tokens, 0) << describe(o);
    EXPECT_EQ(tokens % block_tokens(o), 0);
    EXPECT_EQ(bytes_per_token(o, kLayers, kRow), KvCache(kLayers, kRow, 64, 1, o).bytes_per_token());
    KvCache c(kLayers, kRow, tokens, n_seq, o);
    size_t peak = 0;
    // Round robin in steps of batch / n_seq tokens until the cache is full.
    for (bool grew = true; grew;) {
      grew = false;
      for (int64_t s = 0; s < n_seq; ++s) {
        const int64_t n = batch / n_seq;
        if (c.blocks_needed(s, n) > c.blocks().n_available()) continue;
        append(c, s, n);
        grew = true;
        peak = std::max(peak, c.bytes());
      }
    }
    EXPECT_LE(peak, budget) << describe(o);
    EXPECT_GT(peak, budget * 3 / 4) << describe(o) << ": the memory should be used";
    if (o.quantized()) {
      EXPECT_GT(c.n_hot_blocks(), 0);
      for (int64_t s = 0; s < n_seq; ++s) c.truncate(s, 0);
      EXPECT_EQ(c.n_hot_blocks(), 0) << describe(o);
    }
  }
  // Less than the half rows set aside: nothing fits.
  EXPECT_EQ(tokens_for_memory({KvType::Q4, KeyAxis::Channel, 64, 128, 0}, 30, 192, 1 << 20, 16, 256), 0);
}

}  // namespace
}  // namespace squeeze::kv
