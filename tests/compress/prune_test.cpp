// Pruning masks and SparseGPT against direct computations: masks have the requested sparsity
// and N:M pattern exactly and take the lowest scores; Wanda's scores are |w| times the input
// norm; on correlated inputs SparseGPT's output error is below Wanda's, and Wanda's below
// magnitude's; bad specs are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "compress/gptq.h"
#include "compress/group_quant.h"
#include "compress/prune.h"
#include "core/error.h"
#include "matrix_fixtures.h"

namespace squeeze::compress {
namespace {

using formats::DType;

PruneSpec unstructured(PruneMethod m, double s) { return {m, s, 0, 0, {}}; }
PruneSpec nm(PruneMethod m, int n, int mm) { return {m, 0.0, n, mm, {}}; }

// Every row (or every group of m) has exactly the asked zeros, and each zero's score is at most
// every kept score of its row (group).
void expect_lowest(const std::vector<float>& sc, const std::vector<uint8_t>& mask, int64_t rows,
                   int64_t cols, int64_t span, int64_t zeros) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < cols; c0 += span) {
      int64_t count = 0;
      float max_pruned = -1.0f, min_kept = 1e30f;
      for (int64_t c = c0; c < c0 + span; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        count += mask[i];
        if (mask[i]) max_pruned = std::max(max_pruned, sc[i]);
        else min_kept = std::min(min_kept, sc[i]);
      }
      ASSERT_EQ(count, zeros) << "row " << r << " at " << c0;
      ASSERT_LE(max_pruned, min_kept) << "row " << r << " at " << c0;
    }
  }
}

TEST(Prune, RowMasksHaveTheExactSparsityAndPattern) {
  const int64_t rows = 7, cols = 96;
  const std::vector<float> w = random_weights(rows * cols, 11);
  ThreadPool pool(2);
  const std::vector<float> sc = prune_scores(w.data(), rows, cols, PruneMethod::Magnitude, nullptr);
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(sc[i], std::fabs(w[i]));
  for (double s : {0.5, 0.3, 0.9}) {
    SCOPED_TRACE(s);
    const auto spec = unstructured(PruneMethod::Magnitude, s);
    expect_lowest(sc, row_mask(sc.data(), rows, cols, spec, pool), rows, cols, cols,
                  zeros_among(s, cols));
  }
  EXPECT_EQ(zeros_among(0.3, 96), 29);  // 28.8 rounds to nearest
  for (auto [n, m] : {std::pair{2, 4}, {4, 8}, {1, 4}, {3, 32}}) {
    SCOPED_TRACE(std::to_string(n) + ":" + std::to_string(m));
    const auto spec = nm(PruneMethod::Magnitude, n, m);
    expect_lowest(sc, row_mask(sc.data(), rows, cols, spec, pool), rows, cols, m, n);
  }
  // Ties (all scores equal) still give the exact count, lowest columns first.
  const std::vector<float> flat(static_cast<size_t>(rows * cols), 1.0f);
  const auto mask = row_mask(flat.data(), rows, cols, nm(PruneMethod::Magnitude, 2, 4), pool);
  EXPECT_EQ((std::vector<uint8_t>(mask.begin(), mask.begin() + 8)),
            (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0}));
}

TEST(Prune, WandaScoresWeightByTheInputNorm) {
  const int64_t rows = 3, cols = 64;
  const std::vector<float> w = random_weights(rows * cols, 5);
  const std::vector<double> h = correlated_hessian(cols, 200, 6);
  const std::vector<float> sc = prune_scores(w.data(), rows, cols, PruneMethod::Wanda, &h);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      const double want = std::fabs(w[r * cols + j]) * std::sqrt(h[j * cols + j]);
      ASSERT_NEAR(sc[r * cols + j], want, 1e-5 * want);
    }
  }
  EXPECT_THROW(prune_scores(w.data(), rows, cols, PruneMethod::Wanda, nullptr), Error);
}

struct Result {
  double loss;
  std::vector<float> w;
  int64_t pruned;
};

// The matrix pruned by `spec` and stored as q8_0: magnitude and Wanda by their mask then RTN,
// SparseGPT by GPTQ's loop with the mask.
Result prune_to_q8(const std::vector<float>& w, const std::vector<double>& h, int64_t rows,
                   int64_t cols, const PruneSpec& spec, ThreadPool& pool) {
  const QuantScheme scheme{8, 32, true};
  const Storage st = storage_for(scheme, cols);
  std::vector<uint8_t> out(formats::row_bytes(st.type, cols) * rows);
  Result r{0.0, {}, 0};
  if (spec.method == PruneMethod::SparseGpt) {
    GptqOptions o;
    o.scheme = scheme;
    o.prune = spec;
    std::vector<double> hw = h;
    r.pruned = gptq_quantize(w.data(), rows, cols, hw, o, st, out.data(), pool).pruned;
  } else {
    const std::vector<float> sc = prune_scores(w.data(), rows, cols, spec.method, &h);
    const std::vector<uint8_t> mask = row_mask(sc.data(), rows, cols, spec, pool);
    std::vector<float> wm = w;
    for (size_t i = 0; i < wm.size(); ++i) {
      if (mask[i]) wm[i] = 0.0f;
      r.pruned += mask[i];
    }
    quantize_rtn(wm.data(), rows, cols, scheme, st, out.data(), pool);
  }
  r.w = dequant(st.type, out, rows, cols);
  r.loss = output_loss(w, r.w, h, rows, cols);
  return r;
}

TEST(Prune, SparseGptBeatsWandaBeatsMagnitudeOnCorrelatedInputs) {
  const int64_t rows = 24, cols = 256;
  const std::vector<float> w = random_weights(rows * cols, 21);
  const std::vector<double> h = correlated_hessian(cols, 1500, 22);
  ThreadPool pool(2);
  for (const PruneSpec& shape : {unstructured(PruneMethod::None, 0.5), nm(PruneMethod::None, 2, 4),
                                 nm(PruneMethod::None, 4, 8)}) {
    SCOPED_TRACE(prune_pattern_text(shape));
    auto with = [&](PruneMethod m) {
      PruneSpec s = shape;
      s.method = m;
      return prune_to_q8(w, h, rows, cols, s, pool);
    };
    const Result mag = with(PruneMethod::Magnitude);
    const Result wanda = with(PruneMethod::Wanda);
    const Result sgpt = with(PruneMethod::SparseGpt);
    EXPECT_LT(sgpt.loss, wanda.loss);
    EXPECT_LT(wanda.loss, mag.loss);
    for (const Result* r : {&mag, &wanda, &sgpt}) {
      EXPECT_EQ(r->pruned, rows * cols / 2);
      // The stored matrix has the pattern: at least the mask's zeros in every row / group
      // (rounding may zero a few more).
      const int64_t span = shape.nm() ? shape.m : cols;
      const int64_t need = shape.nm() ? shape.n : cols / 2;
      if (r == &sgpt && !shape.nm()) continue;  // SparseGPT spreads its zeros over the block
      for (int64_t i = 0; i < rows * cols; i += span) {
        const auto zeros = std::count(r->w.begin() + i, r->w.begin() + i + span, 0.0f);
        ASSERT_GE(zeros, need) << "at " << i;
      }
    }
    const auto zeros = std::count(sgpt.w.begin(), sgpt.w.end(), 0.0f);
    EXPECT_GE(zeros, rows * cols / 2);
  }
}

TEST(Prune, OwlGivesLayersWithMoreOutliersMoreWeights) {
  // Outlier ratios: the fraction above m times the mean, over all of a layer's matrices.
  const std::vector<float> a = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 30};  // mean 3.5: one above 2x
  const std::vector<float> b = {1, 1, 1, 1};
  EXPECT_DOUBLE_EQ(outlier_ratio({&a}, 2.0), 1.0 / 12);
  EXPECT_DOUBLE_EQ(outlier_ratio({&a, &b}, 2.0), 1.0 / 16);  // mean 34 / 16
  EXPECT_DOUBLE_EQ(outlier_ratio({&b}, 2.0), 0.0);
  const std::vector<double> ratios = {0.01, 0.05, 0.03, 0.01};
  const std::vector<double> s = owl_sparsities(ratios, 0.5, 0.08);
  ASSERT_EQ(s.size(), 4u);
  double mean = 0.0;
  for (double x : s) mean += x / 4;
  EXPECT_NEAR(mean, 0.5, 1e-12);                // the target on average
  EXPECT_NEAR(s[0] - s[1], 0.16, 1e-12);        // spread 2 * lambda, fewest outliers pruned most
  EXPECT_NEAR(s[0], s[3], 1e-12);
  EXPECT_LT(s[2], s[0]);
  EXPECT_GT(s[2], s[1]);
  EXPECT_EQ(owl_sparsities({0.02, 0.02}, 0.6, 0.1), (std::vector<double>{0.6, 0.6}));
  PruneSpec spec = unstructured(PruneMethod::Wanda, 0.5);
  spec.layer_sparsity = s;
  EXPECT_DOUBLE_EQ(spec.for_layer(1).sparsity, s[1]);
  EXPECT_DOUBLE_EQ(spec.for_layer(-1).sparsity, 0.5);  // outside the blocks: uniform
  EXPECT_TRUE(spec.for_layer(2).layer_sparsity.empty());
}

TEST(Prune, LayerSparsityItems) {
  EXPECT_EQ(parse_layer_sparsity({"0-1=0.3", "1,3=0.7"}, 5, 0.5),
            (std::vector<double>{0.3, 0.7, 0.5, 0.7, 0.5}));
  for (const char* bad : {"0-1", "0-1=1", "0-1=x", "5=0.3", "=0.3", "1-0=0.2"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_layer_sparsity({bad}, 5, 0.5), UsageError);
  }
}

TEST(Prune, BadSpecsAreClearErrors) {
  PruneSpec s;
  EXPECT_THROW(parse_nm_pattern("2-4", s), UsageError);
  EXPECT_THROW(parse_nm_pattern("2:", s), UsageError);
  EXPECT_THROW(parse_nm_pattern("4:4", s), UsageError);
  EXPECT_THROW(parse_nm_pattern("0:4", s), UsageError);
  s.method = PruneMethod::Magnitude;
  EXPECT_THROW(parse_nm_pattern("2:5", s), UsageError);  // 5 does not divide 128
  EXPECT_THROW(parse_nm_pattern("4:4", s), UsageError);
  parse_nm_pattern("2:4", s);
  EXPECT_EQ(s.n, 2);
  EXPECT_EQ(s.m, 4);
  EXPECT_THROW(parse_prune_method("obs"), UsageError);
  EXPECT_EQ(parse_prune_method("SparseGPT"), PruneMethod::SparseGpt);
  EXPECT_THROW(check_prune_spec(unstructured(PruneMethod::Wanda, 1.0)), UsageError);
  EXPECT_THROW(check_prune_spec(unstructured(PruneMethod::Wanda, 0.0)), UsageError);
  GptqOptions o;
  o.scheme = {4, 32, true};
  o.prune = unstructured(PruneMethod::SparseGpt, 0.5);
  EXPECT_NO_THROW(check_gptq_options(o));
  o.scheme.sym = false;  // q4_1 has no exact zero
  EXPECT_THROW(check_gptq_options(o), UsageError);
  o.scheme.sym = true;
  o.act_order = true;
  o.scheme.group = -1;
  EXPECT_THROW(check_gptq_options(o), UsageError);
  o.act_order = false;
  o.prune.method = PruneMethod::Wanda;  // a mask set before, not in the loop
  EXPECT_THROW(check_gptq_options(o), Error);
}

}  // namespace
}  // namespace squeeze::compress
