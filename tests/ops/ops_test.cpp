// Each op against a plain double-precision reference written from its definition.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "random.h"
#include "core/error.h"
#include "ops/attention.h"
#include "ops/head_scores.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace squeeze::ops {
namespace {

using testing::randn;

TEST(RmsNorm, MatchesDefinition) {
  const auto x = randn(576, 1);
  const auto w = randn(576, 2);
  std::vector<float> out(576);
  rms_norm(x.data(), w.data(), 576, 1e-5f, out.data());
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double scale = 1.0 / std::sqrt(ss / 576 + 1e-5);
  for (int i = 0; i < 576; ++i) ASSERT_NEAR(out[i], x[i] * scale * w[i], 1e-5);
}

TEST(Rope, MatchesDefinitionBothLayouts) {
  const int head_dim = 64, n_heads = 3, n_rot = 64;
  for (RopeLayout layout : {RopeLayout::Norm, RopeLayout::Neox}) {
    Rope rope(n_rot, 100000.0f, layout);
    for (int64_t pos : {0, 1, 17, 500}) {
      auto x = randn(head_dim * n_heads, 3);
      const auto orig = x;
      rope.apply(x.data(), n_heads, head_dim, pos);
      for (int h = 0; h < n_heads; ++h) {
        for (int i = 0; i < n_rot / 2; ++i) {
          const double theta = pos * std::pow(100000.0, -2.0 * i / n_rot);
          const int a = layout == RopeLayout::Norm ? 2 * i : i;
          const int b = layout == RopeLayout::Norm ? 2 * i + 1 : i + n_rot / 2;
          const double x0 = orig[h * head_dim + a], x1 = orig[h * head_dim + b];
          // float angle accumulation: allow ~1e-3 relative error at large positions
          ASSERT_NEAR(x[h * head_dim + a], x0 * std::cos(theta) - x1 * std::sin(theta), 2e-3);
          ASSERT_NEAR(x[h * head_dim + b], x0 * std::sin(theta) + x1 * std::cos(theta), 2e-3);
        }
      }
    }
  }
}

// Frequency divisors (Llama 3.1's rope_freqs) divide each angle: with every factor 2, the
// angles at position 2p are those at p without factors, to the bit (halving is exact in float).
TEST(Rope, FrequencyFactorsDivideTheAngles) {
  const int n_rot = 32;
  const std::vector<float> twos(n_rot / 2, 2.0f);
  const Rope plain(n_rot, 500000.0f, RopeLayout::Norm);
  const Rope slowed(n_rot, 500000.0f, RopeLayout::Norm, twos.data());
  std::vector<float> want(n_rot), got(n_rot);
  for (int64_t pos : {1, 7, 300, 8000}) {
    plain.angles(pos, want.data());
    slowed.angles(2 * pos, got.data());
    EXPECT_EQ(got, want) << pos;
    slowed.angles(pos, got.data());
    EXPECT_NE(got, want) << pos;
  }
}

TEST(Attention, MatchesNaiveCausalGqa) {
  const AttentionShape shape{6, 2, 16, 0.25f};
  const int64_t n_ctx = 12, pos0 = 5, n_tokens = 7;
  const int64_t q_row = 6 * 16, kv_row = 2 * 16;
  const auto q = randn(n_tokens * q_row, 4);
  const auto kf = randn(n_ctx * kv_row, 5);
  const auto vf = randn(n_ctx * kv_row, 6);
  std::vector<f16_t> k(kf.size()), v(vf.size());
  for (size_t i = 0; i < kf.size(); ++i) k[i] = f32_to_f16(kf[i]);
  for (size_t i = 0; i < vf.size(); ++i) v[i] = f32_to_f16(vf[i]);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    AttentionScratch scratch;
    std::vector<float> out(n_tokens * q_row);
    std::vector<int32_t> cells(n_ctx);
    for (int64_t j = 0; j < n_ctx; ++j) cells[j] = static_cast<int32_t>(j);
    attention(shape, q.data(), n_tokens, pos0, KvView{k.data(), v.data(), kv_row, cells},
              out.data(), pool, scratch);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int h = 0; h < 6; ++h) {
        const int hk = h / 3;
        std::vector<double> s(pos0 + t + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= pos0 + t; ++j) {
          double dot = 0;
          for (int d = 0; d < 16; ++d) {
            dot += double(q[t * q_row + h * 16 + d]) * f16_to_f32(k[j * kv_row + hk * 16 + d]);
          }
          s[j] = 0.25 * dot;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int d = 0; d < 16; ++d) {
          double o = 0;
          for (size_t j = 0; j < s.size(); ++j) o += s[j] / sum * f16_to_f32(v[j * kv_row + hk * 16 + d]);
          // q is rounded to half for Q.K, so allow half-precision-level error
          ASSERT_NEAR(out[t * q_row + h * 16 + d], o, 5e-3) << t << " " << h << " " << d;
        }
      }
    }
  }
}

// A paged cache: the sequence's rows scattered over cells in blocks of 16 (kv/kv_cache.h), in
// an order of blocks unlike the positions'. Attention must read them by the cell list and give
// the bits of the same rows stored in order, for decode and for batches, on the active tier.
TEST(Attention, ScatteredCellsGiveTheBitsOfContiguousRows) {
  const AttentionShape shape{9, 3, 64, 0.125f};
  const int64_t kv_row = 3 * 64, q_row = 9 * 64;
  for (int64_t n_tokens : {1, 7, 40}) {
    for (int64_t pos0 : {0, 21, 100}) {
      const int64_t n = pos0 + n_tokens;
      const int64_t n_blocks = (n + 15) / 16 + 3;
      const auto kf = randn(n * kv_row, 11), vf = randn(n * kv_row, 12);
      const auto q = randn(n_tokens * q_row, 13);
      std::vector<f16_t> k(n * kv_row), v(n * kv_row);
      for (size_t i = 0; i < k.size(); ++i) k[i] = f32_to_f16(kf[i]), v[i] = f32_to_f16(vf[i]);
      // Block i of the sequence in cell block n_blocks - 1 - i: reversed, in a larger pool.
      std::vector<f16_t> kp(n_blocks * 16 * kv_row), vp(n_blocks * 16 * kv_row);
      std::vector<int32_t> scattered(n), in_order(n);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t cell = (n_blocks - 1 - j / 16) * 16 + j % 16;
        scattered[j] = static_cast<int32_t>(cell);
        in_order[j] = static_cast<int32_t>(j);
        std::copy_n(k.begin() + j * kv_row, kv_row, kp.begin() + cell * kv_row);
        std::copy_n(v.begin() + j * kv_row, kv_row, vp.begin() + cell * kv_row);
      }
      ThreadPool pool(2);
      AttentionScratch scratch;
      std::vector<float> want(n_tokens * q_row), got(n_tokens * q_row);
      attention(shape, q.data(), n_tokens, pos0, KvView{k.data(), v.data(), kv_row, in_order},
                want.data(), pool, scratch);
      attention(shape, q.data(), n_tokens, pos0, KvView{kp.data(), vp.data(), kv_row, scattered},
                got.data(), pool, scratch);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << n_tokens << " tokens at " << pos0 << ", output " << i;
      }
    }
  }
}

// Head pruning (HeadSegment): kept heads have the bits of the unmasked run (whether or not
// the kept heads of a group are consecutive), dropped heads are zero; one mask for the whole
// batch, or a mask per segment of it.
TEST(Attention, HeadMaskKeepsTheBitsOfKeptHeadsAndZeroesTheRest) {
  const int64_t kv_row = 3 * 64, q_row = 9 * 64;
  const std::vector<std::vector<uint8_t>> masks = {
      {1, 0, 1, 0, 1, 1, 0, 0, 1}, {0, 0, 0, 1, 1, 1, 0, 1, 0}, {1, 1, 1, 1, 1, 1, 1, 1, 0},
      {0, 0, 0, 0, 0, 0, 0, 0, 0}};
  for (int64_t n_tokens : {1, 7, 40}) {
    const int64_t pos0 = 19, n = pos0 + n_tokens;
    const auto kf = randn(n * kv_row, 21), vf = randn(n * kv_row, 22);
    const auto q = randn(n_tokens * q_row, 23);
    std::vector<f16_t> k(n * kv_row), v(n * kv_row);
    for (size_t i = 0; i < k.size(); ++i) k[i] = f32_to_f16(kf[i]), v[i] = f32_to_f16(vf[i]);
    std::vector<int32_t> cells(n);
    for (int64_t j = 0; j < n; ++j) cells[j] = static_cast<int32_t>(j);
    ThreadPool pool(2);
    AttentionScratch scratch;
    const AttentionShape shape{9, 3, 64, 0.125f};
    const KvView view{k.data(), v.data(), kv_row, cells};
    std::vector<float> want(n_tokens * q_row);
    attention(shape, q.data(), n_tokens, pos0, view, want.data(), pool, scratch);
    auto check = [&](std::span<const HeadSegment> segs) {
      std::vector<float> got(n_tokens * q_row, 7.0f);
      attention(shape, q.data(), n_tokens, pos0, view, got.data(), pool, scratch, segs);
      for (int64_t i = 0; i < n_tokens * q_row; ++i) {
        const int64_t t = i / q_row;
        const int h = static_cast<int>(i % q_row / 64);
        const auto seg = std::find_if(segs.begin(), segs.end(),
                                      [&](const HeadSegment& s) { return t >= s.t0 && t < s.t1; });
        ASSERT_EQ(got[i], seg->keep[h] ? want[i] : 0.0f) << n_tokens << " tokens, output " << i;
      }
    };
    for (const auto& mask : masks) {
      const HeadSegment one{0, n_tokens, mask.data()};
      check(std::span(&one, 1));
    }
    std::vector<HeadSegment> segs;
    for (int64_t t0 = 0, i = 0; t0 < n_tokens; t0 += 13, ++i) {
      segs.push_back({t0, std::min(n_tokens, t0 + 13), masks[i % masks.size()].data()});
    }
    check(segs);
  }
}

// head_scores against a double-precision reference of each score's definition
// (ops/head_scores.h), and top_heads' choice.
TEST(HeadScores, MatchTheirDefinitions) {
  const int n_head = 6, n_kv = 2, hd = 16;
  const int64_t n = 70, kv_row = n_kv * hd, q_row = n_head * hd;
  const float scale = 0.25f;
  const auto kf = randn(n * kv_row, 31), vf = randn(n * kv_row, 32);
  const std::vector<int64_t> pos = {20, 45, 69};
  const auto q = randn(pos.size() * q_row, 33);
  std::vector<f16_t> k(n * kv_row), v(n * kv_row);
  for (size_t i = 0; i < k.size(); ++i) k[i] = f32_to_f16(kf[i]), v[i] = f32_to_f16(vf[i]);
  std::vector<int32_t> cells(n);
  for (int64_t j = 0; j < n; ++j) cells[j] = static_cast<int32_t>(j);
  const AttentionShape shape{n_head, n_kv, hd, scale};
  ThreadPool pool(2);
  HeadScoreScratch scratch;
  for (const HeadScore kind : {HeadScore::Qk, HeadScore::Entropy, HeadScore::VNorm, HeadScore::A2sf}) {
    std::vector<float> got(n_head);
    prepare_head_scores(shape, kind, KvView{k.data(), v.data(), kv_row, cells}, n, pool, scratch);
    head_scores(shape, kind, q.data(), q_row, pos, KvView{k.data(), v.data(), kv_row, cells},
                got.data(), pool, scratch);
    for (int h = 0; h < n_head; ++h) {
      const int hk = h / 3;
      double total = 0, mass = 0;
      std::vector<double> acc(n, 0.0);
      for (size_t i = 0; i < pos.size(); ++i) {
        const float* qh = q.data() + i * q_row + h * hd;
        const int64_t m = pos[i] + 1;
        std::vector<double> s(m), cosv(m);
        double qn = 0, mx = -1e300;
        for (int d = 0; d < hd; ++d) qn += double(qh[d]) * qh[d];
        for (int64_t j = 0; j < m; ++j) {
          double dot = 0, kn = 0;
          for (int d = 0; d < hd; ++d) {
            const double kk = f16_to_f32(k[j * kv_row + hk * hd + d]);
            dot += double(f16_to_f32(f32_to_f16(qh[d]))) * kk;
            kn += kk * kk;
          }
          s[j] = scale * dot;
          cosv[j] = dot / std::sqrt(qn * kn);
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (double& e : s) e /= sum;
        double u = 0;
        if (kind == HeadScore::Qk) {
          u = *std::max_element(cosv.begin(), cosv.end());
        } else if (kind == HeadScore::Entropy) {
          for (double p : s) u -= p > 0 ? p * std::log(p) : 0;
          u = 1 - u / std::log(double(m));
        } else if (kind == HeadScore::VNorm) {
          for (int64_t j = 0; j < m; ++j) {
            double vn = 0;
            for (int d = 0; d < hd; ++d) vn += std::abs(f16_to_f32(v[j * kv_row + hk * hd + d]));
            u += s[j] * vn;
          }
        } else {
          const double decay = i == 0 ? 1.0 : std::pow(0.9, double(pos[i] - pos[i - 1]) / 512);
          for (int64_t j = 0; j < n; ++j) acc[j] = acc[j] * decay + (j < m ? s[j] : 0.0);
          mass = mass * decay + 1;
        }
        total += u;
      }
      const double want = kind == HeadScore::A2sf ? *std::max_element(acc.begin(), acc.end()) / mass
                                                  : total / double(pos.size());
      EXPECT_NEAR(got[h], want, 2e-3 * (1 + std::abs(want))) << head_score_name(kind) << " head " << h;
    }
  }
  uint8_t keep[5];
  top_heads(std::vector<float>{0.1f, 0.5f, 0.3f, 0.5f, 0.2f}, 3, keep);
  EXPECT_EQ(std::vector<uint8_t>(keep, keep + 5), (std::vector<uint8_t>{0, 1, 1, 1, 0}));
  uint8_t gkeep[6];
  top_groups(std::vector<float>{0.1f, 0.9f, 0.3f, 0.3f, 0.2f, 0.2f}, 2, 2, gkeep);
  EXPECT_EQ(std::vector<uint8_t>(gkeep, gkeep + 6), (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));
  EXPECT_THROW(parse_head_score("cosine"), UsageError);
  EXPECT_EQ(parse_head_score("a2sf"), HeadScore::A2sf);
}

// A decode step of several sequences (different lengths, own caches) in one pass: each
// query's output has the bits of attention() on that sequence alone.
TEST(Attention, DecodeOfManySequencesEqualsEachAlone) {
  const AttentionShape shape{9, 3, 64, 0.125f};
  const int64_t kv_row = 3 * 64, q_row = 9 * 64;
  const std::vector<int64_t> positions = {0, 5, 16, 31, 100, 257, 3};
  std::vector<std::vector<f16_t>> ks, vs;
  std::vector<std::vector<int32_t>> cells;
  for (size_t s = 0; s < positions.size(); ++s) {
    const int64_t n = positions[s] + 1;
    const auto kf = randn(n * kv_row, 20 + s), vf = randn(n * kv_row, 40 + s);
    ks.emplace_back(n * kv_row);
    vs.emplace_back(n * kv_row);
    for (size_t i = 0; i < kf.size(); ++i) ks[s][i] = f32_to_f16(kf[i]), vs[s][i] = f32_to_f16(vf[i]);
    cells.emplace_back(n);
    for (int64_t j = 0; j < n; ++j) cells[s][j] = static_cast<int32_t>(j);
  }
  const auto q = randn(static_cast<int64_t>(positions.size()) * q_row, 7);
  ThreadPool pool(2);
  AttentionScratch scratch;
  std::vector<float> want(q.size()), got(q.size(), -1.0f);
  std::vector<DecodeQuery> queries;
  for (size_t s = 0; s < positions.size(); ++s) {
    const KvView kv{ks[s].data(), vs[s].data(), kv_row, cells[s]};
    attention(shape, q.data() + s * q_row, 1, positions[s], kv, want.data() + s * q_row, pool,
              scratch);
    queries.push_back({q.data() + s * q_row, positions[s], kv, got.data() + s * q_row});
  }
  attention_decode(shape, queries, pool, scratch);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "sequence " << i / q_row << ", output " << i % q_row;
  }
}

TEST(Matmul, EqualsDequantizedFloatProduct) {
  using formats::DType;
  for (DType type : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_1, DType::Q4_0}) {
    const int64_t n_cols = 256, n_rows = 37, n_tokens = 5;
    const auto wf = randn(n_cols * n_rows, 7, 0.1f);
    const size_t rb = formats::row_bytes(type, n_cols);
    std::vector<uint8_t> wq(rb * n_rows);
    const auto& k = formats::kernels(type);
    for (int64_t r = 0; r < n_rows; ++r) k.quantize_row(wf.data() + r * n_cols, wq.data() + r * rb, n_cols);
    WeightView w{type, n_cols, n_rows, rb, wq.data()};
    const auto x = randn(n_tokens * n_cols, 8);
    std::vector<float> y(n_tokens * n_rows);
    ThreadPool pool(2);
    MatmulScratch scratch;
    matmul(w, x.data(), n_tokens, n_cols, y.data(), n_rows, pool, scratch);
    std::vector<float> row(n_cols);
    for (int64_t r = 0; r < n_rows; ++r) {
      dequantize_row(w, r, row.data());
      for (int64_t t = 0; t < n_tokens; ++t) {
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < n_cols; ++c) {
          ref += double(row[c]) * x[t * n_cols + c];
          mag += std::abs(double(row[c]) * x[t * n_cols + c]);
        }
        // Activations are rounded to the weight format's vec_dot type (8-bit blocks for the
        // quantized formats: relative error about 1/127 of each block's range).
        const double tol = type == DType::F32 ? 1e-5 * mag : 1e-2 * mag;
        ASSERT_NEAR(y[t * n_rows + r], ref, tol) << formats::format_info(type).name;
      }
    }
  }
}

// CATS's up projection: the kept rows only, each equal to the dense product's row bit for bit
// (single rows, runs and the repacked Q4_0 order at 64 rows), the other outputs untouched.
TEST(MatmulRows, EqualTheDenseProductsRowsAndTouchNothingElse) {
  using formats::DType;
  for (DType type : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_1, DType::Q4_0}) {
    for (int64_t n_rows : {37, 64, 1536}) {
      const int64_t n_cols = 256;
      const auto wf = randn(n_cols * n_rows, 11, 0.1f);
      const size_t rb = formats::row_bytes(type, n_cols);
      std::vector<uint8_t> wq(rb * n_rows);
      const auto& k = formats::kernels(type);
      for (int64_t r = 0; r < n_rows; ++r) k.quantize_row(wf.data() + r * n_cols, wq.data() + r * rb, n_cols);
      WeightView w{type, n_cols, n_rows, rb, wq.data()};
      const auto x = randn(n_cols, 12);
      ThreadPool pool(2);
      MatmulScratch scratch;
      std::vector<float> dense(n_rows);
      matmul(w, x.data(), 1, n_cols, dense.data(), n_rows, pool, scratch);
      // About half the rows, in runs of every length, ascending.
      std::mt19937 rng(13);
      std::vector<int32_t> rows;
      for (int32_t r = 0; r < n_rows; ++r) {
        if (rng() % 2 == 0) rows.push_back(r);
      }
      constexpr float kUntouched = -12345.0f;
      std::vector<float> y(n_rows, kUntouched);
      matmul_rows(w, x.data(), rows.data(), static_cast<int64_t>(rows.size()), y.data(), pool, scratch);
      size_t next = 0;
      for (int32_t r = 0; r < n_rows; ++r) {
        const bool kept = next < rows.size() && rows[next] == r;
        next += kept ? 1 : 0;
        if (kept) {
          ASSERT_EQ(y[r], dense[r]) << formats::format_info(type).name << " row " << r << " of " << n_rows;
        } else {
          ASSERT_EQ(y[r], kUntouched) << formats::format_info(type).name << " row " << r;
        }
      }
    }
  }
}

// Which order a Q8_0 matrix is summed in: the tier's own block order where it has one (AMX),
// except in a matrix marked llama_order (the output head), which keeps vec_dot's lanes; on
// every token count (one, a few, a batch of tiles), so that a row's bits do not depend on it.
TEST(Matmul, Q8_0OrderFollowsTheTierAndTheView) {
  using formats::DType;
  const auto& k = formats::kernels(DType::Q8_0);
  const int64_t n_cols = 576, n_rows = 48;
  const auto wf = randn(n_cols * n_rows, 21, 0.1f);
  const size_t rb = formats::row_bytes(DType::Q8_0, n_cols);
  std::vector<uint8_t> wq(rb * n_rows);
  for (int64_t r = 0; r < n_rows; ++r) k.quantize_row_ref(wf.data() + r * n_cols, wq.data() + r * rb, n_cols);
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (const bool llama_order : {false, true}) {
    WeightView w{DType::Q8_0, n_cols, n_rows, rb, wq.data()};
    w.llama_order = llama_order;
    const auto dot = k.own_order && !llama_order ? k.vec_dot_repacked : k.vec_dot;
    for (const int64_t n_tokens : {1, 3, 40}) {
      const auto x = randn(n_tokens * n_cols, 22);
      std::vector<uint8_t> xq(rb * n_tokens);
      for (int64_t t = 0; t < n_tokens; ++t) k.quantize_row(x.data() + t * n_cols, xq.data() + t * rb, n_cols);
      std::vector<float> y(n_tokens * n_rows);
      matmul(w, x.data(), n_tokens, n_cols, y.data(), n_rows, pool, scratch);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < n_rows; ++r) {
          ASSERT_EQ(y[t * n_rows + r], dot(n_cols, wq.data() + r * rb, xq.data() + t * rb))
              << "llama_order " << llama_order << " tokens " << n_tokens << " (" << r << ", " << t << ")";
        }
      }
    }
  }
}

}  // namespace
}  // namespace squeeze::ops
