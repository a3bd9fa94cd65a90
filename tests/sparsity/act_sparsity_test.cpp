// Activation sparsity on the tiny model: calibrated thresholds reach their density on held-back
// text, one-token decoding through the column-layout kernels computes what the dense products of
// the zeroed inputs compute, and the thresholds really change the model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "compress/sparsify.h"
#include "formats/format.h"
#include "core/error.h"
#include "model/act_sparsity.h"
#include "model/context.h"
#include "model/model.h"
#include "tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace squeeze {
namespace {

namespace fs = std::filesystem;
using sparsity::Method;

// Sentences of random words: varied enough that windows differ, byte-level tokenizable.
std::string random_text(uint64_t seed, int n_sentences) {
  static const char* words[] = {"the", "river", "of", "stone", "king", "found", "a", "small",
                                "city", "north", "in", "1840", "when", "battle", "song",
                                "album", "was", "released", "by", "her", "first", "season"};
  std::mt19937_64 rng(seed);
  std::string s;
  for (int i = 0; i < n_sentences; ++i) {
    const int n = 5 + static_cast<int>(rng() % 10);
    for (int w = 0; w < n; ++w) s += std::string(w ? " " : "") + words[rng() % std::size(words)];
    s += ".\n";
  }
  return s;
}

class ActSparsityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("squeeze_actsp_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "tiny.gguf").string();
    testing::write_tiny_model(path_);
    model_ = model::Model::load(path_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  compress::SparsifyResult calibrate(Method method, double s, bool greedy = false) {
    tokenizer::Tokenizer tok(tokenizer::read_vocab(model_->file()));
    compress::SparsifyOptions o;
    o.method = method;
    o.greedy = greedy;
    o.levels = {s};
    o.n_samples = 16;
    o.ctx = 64;
    o.heldout_samples = 8;
    return compress::calibrate_sparsity(*model_, tok, random_text(5, 2000), o, pool_);
  }

  fs::path dir_;
  std::string path_;
  std::unique_ptr<model::Model> model_;
  ThreadPool pool_{2};
};

TEST_F(ActSparsityTest, HeldBackDensityWithinThreePointsOfTheTarget) {
  for (Method method : {Method::Teal, Method::Cats}) {
    for (double s : {0.25, 0.5, 0.6}) {
      const compress::SparsifyResult r = calibrate(method, s);
      ASSERT_EQ(r.table.n_layer, model_->hparams().n_layer);
      for (int site = 0; site < sparsity::n_sites(method); ++site) {
        EXPECT_NEAR(r.heldout_density[0][site], 1.0 - s, 0.03)
            << sparsity::method_name(method) << " " << s << " "
            << sparsity::site_name(method, site);
      }
      // The union over a batch: b = 1 is the plain density, and it grows with b.
      ASSERT_GE(r.batch_sizes.size(), 4u);
      EXPECT_EQ(r.batch_sizes[0], 1);
      for (int site = 0; site < sparsity::n_sites(method); ++site) {
        EXPECT_NEAR(r.batch_density[0][site], r.heldout_density[0][site], 1e-9);
        for (size_t i = 1; i < r.batch_sizes.size(); ++i) {
          EXPECT_EQ(r.batch_sizes[i], 2 * r.batch_sizes[i - 1]);
          if (r.batch_density[i - 1][site] < 1.0) {  // until every column is needed
            EXPECT_GT(r.batch_density[i][site], r.batch_density[i - 1][site]);
          } else {
            EXPECT_EQ(r.batch_density[i][site], 1.0);
          }
        }
      }
      // Thresholds grow with the level, from 0 at level 0.
      for (int64_t il = 0; il < r.table.n_layer; ++il) {
        for (int site = 0; site < r.table.sites(); ++site) {
          EXPECT_EQ(r.table.at(il, site, 0), 0.0f);
          for (size_t k = 1; k < r.table.levels.size(); ++k) {
            ASSERT_GE(r.table.at(il, site, k), r.table.at(il, site, k - 1));
          }
        }
      }
    }
  }
}

// Greedy allocation (TEAL's block-wise search): at every level each block's shares, weighted by
// the weights behind each site, make up the level (up to the 0.99 cap); the shares start at 0,
// never fall as the level rises, and are uneven (else it would be the uniform table); the
// thresholds are those shares' quantiles, refined, so the held-back weighted density still
// lands within 3 points of the target. CATS has one site a block: refused.
TEST_F(ActSparsityTest, GreedyAllocationSharesEachLevelAmongTheSites) {
  const compress::SparsifyResult r = calibrate(Method::Teal, 0.5, /*greedy=*/true);
  const auto& t = r.table;
  const size_t nl = t.levels.size();
  ASSERT_EQ(r.allocation.size(), static_cast<size_t>(t.n_layer) * t.sites() * nl);
  auto share = [&](int64_t il, int s, size_t k) {
    return r.allocation[(static_cast<size_t>(il) * t.sites() + s) * nl + k];
  };
  bool uneven = false;
  for (int64_t il = 0; il < t.n_layer; ++il) {
    for (size_t k = 0; k < nl; ++k) {
      std::array<double, sparsity::kTealSites> density{};
      for (int s = 0; s < t.sites(); ++s) {
        const double p = share(il, s, k);
        ASSERT_GE(p, 0.0);
        ASSERT_LE(p, 0.99 + 1e-9);
        if (k == 0) {
          EXPECT_EQ(p, 0.0);
        } else {
          ASSERT_GE(p, share(il, s, k - 1) - 1e-12) << il << " " << s << " " << k;
        }
        density[s] = 1.0 - p;
        uneven = uneven || std::fabs(p - t.levels[k]) > 0.05;
      }
      EXPECT_NEAR(1.0 - model::weighted_density(*model_, Method::Teal, density), t.levels[k],
                  1e-6) << "layer " << il << " level " << t.levels[k];
    }
  }
  EXPECT_TRUE(uneven);
  EXPECT_NEAR(r.heldout_weighted_density[0], 0.5, 0.03);
  for (int64_t il = 0; il < t.n_layer; ++il) {
    for (int s = 0; s < t.sites(); ++s) {
      EXPECT_EQ(t.at(il, s, 0), 0.0f);
      for (size_t k = 1; k < nl; ++k) ASSERT_GE(t.at(il, s, k), t.at(il, s, k - 1));
    }
  }
  EXPECT_THROW(calibrate(Method::Cats, 0.5, /*greedy=*/true), UsageError);
}

// Logits of `tokens` decoded one at a time (the sparse kernels) and as one batch (dense
// products of the zeroed inputs).
void decode_both(const model::Model& m, const model::ActSparsity* policy,
                 const std::vector<int32_t>& tokens, ThreadPool& pool, std::vector<float>& one,
                 std::vector<float>& batch, model::SparsityCounters* counters = nullptr) {
  const int64_t n_vocab = m.hparams().n_vocab;
  model::Context a(m, 64, pool, 64), b(m, 64, pool, 64);
  a.set_act_sparsity(policy);
  b.set_act_sparsity(policy);
  one.clear();
  for (int32_t t : tokens) {
    const auto l = a.decode({&t, 1});
    one.insert(one.end(), l.begin(), l.end());
  }
  const auto l = b.decode(tokens, /*all_logits=*/true);
  batch.assign(l.begin(), l.end());
  ASSERT_EQ(one.size(), tokens.size() * n_vocab);
  if (counters != nullptr) *counters = a.sparsity_counters();
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

// One token at a time runs the column-layout kernels on float activations; a batch runs the
// dense products of the zeroed inputs, whose activations are rounded to the weights'
// vec_dot_type (F16 for F16 weights, Q8_0 for Q8_0). At level 0 nothing is zeroed, so the two
// must agree to that rounding. At 0.5 a rounding-sized difference can flip an activation across
// its threshold and the flips compound over the layers, so there the test asks for the same top
// token and close logits, not rounding-level agreement.
TEST_F(ActSparsityTest, OneTokenSparseKernelsMatchTheZeroedDenseProducts) {
  std::vector<int32_t> tokens;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 24; ++i) tokens.push_back(static_cast<int32_t>(rng() % 256));
  for (formats::DType type : {formats::DType::F16, formats::DType::Q8_0}) {
    testing::TinyModelSpec spec;
    spec.matrix_type = type;
    testing::write_tiny_model(path_, spec);
    model_ = model::Model::load(path_);
    const std::string what(formats::format_info(type).name);
    std::vector<float> dense_one, dense_batch;
    decode_both(*model_, nullptr, tokens, pool_, dense_one, dense_batch);
    double scale = 0;
    for (float v : dense_batch) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    // F16 activations lose ~2^-11 relative, Q8_0 ones ~2^-8: the level-0 bound per format.
    const double rounding = type == formats::DType::F16 ? 2e-3 : 2e-2;
    const int64_t nv = model_->hparams().n_vocab;

    for (Method method : {Method::Teal, Method::Cats}) {
      const compress::SparsifyResult r = calibrate(method, 0.5);
      const model::ActSparsity policy(*model_, r.table, 0.5, pool_);
      EXPECT_EQ(policy.n_dense_fallback(), 0);
      if (method == Method::Teal) {  // q/k/v and gate/up stacked (formats match)
        EXPECT_EQ(policy.layer(0).qkv.n_rows, model_->layers[0].wq.n_rows +
                                                  2 * model_->layers[0].wk.n_rows);
        EXPECT_EQ(policy.layer(0).gate_up.n_rows, 2 * model_->hparams().n_ff);
        EXPECT_EQ(policy.layer(0).wq.n_rows, 0);
      }
      EXPECT_GT(policy.bytes(), 0u);
      std::vector<float> one, batch;
      model::SparsityCounters c;
      decode_both(*model_, &policy, tokens, pool_, one, batch, &c);
      int agree = 0;
      for (size_t t = 0; t < tokens.size(); ++t) {
        auto top = [&](const std::vector<float>& l) {
          return std::max_element(l.begin() + t * nv, l.begin() + (t + 1) * nv) - l.begin();
        };
        agree += top(one) == top(batch);
      }
      EXPECT_GE(agree, 22) << what << " " << sparsity::method_name(method);
      EXPECT_LT(max_abs_diff(one, batch), 0.1 * scale) << what << " " << sparsity::method_name(method);
      // Sparsity changed the model, and kept about half at every site.
      EXPECT_GT(max_abs_diff(batch, dense_batch), 0.05 * scale) << what;
      for (int site = 0; site < sparsity::n_sites(method); ++site) {
        EXPECT_GT(c.density(site), 0.3) << what << " site " << site;
        EXPECT_LT(c.density(site), 0.7) << what << " site " << site;
      }
      // Level 0 zeroes nothing: one token then runs the dense kernels (it keeps more than
      // kSparseMaxDensity, 90%, in src/model/llama.cpp) and both paths compute the dense model.
      const model::ActSparsity zero(*model_, r.table, 0.0, pool_);
      decode_both(*model_, &zero, tokens, pool_, one, batch, &c);
      EXPECT_LT(max_abs_diff(batch, dense_batch), 1e-5 * scale) << what;
      EXPECT_LT(max_abs_diff(one, dense_one), rounding * scale) << what;
      EXPECT_EQ(c.density(0), 1.0);
    }
  }
}

// TEAL's MLP for one token runs as ranges of neurons, one per thread (gate/up rows, SwiGLU,
// the threshold and down's partial product each; llama.cpp's sparse_mlp_by_neurons); with a
// tensor callback set the model runs the separate products instead (the callback needs the
// gate's values). The two compute the same: gate/up bit for bit, down up to the order of its
// float sums, so the logits agree to rounding unless such a difference flips an activation
// across its threshold (allowed on one token of 24). n_ff = 384: three row tiles of 128, so the
// two threads' ranges are uneven (128 and 256 neurons). The Q4 formats (the float ones run the
// separate products: their gate/up rows split by threads measured slower).
TEST_F(ActSparsityTest, MlpByRangesOfNeuronsMatchesTheSeparateProducts) {
  std::vector<int32_t> tokens;
  std::mt19937_64 rng(12);
  for (int i = 0; i < 24; ++i) tokens.push_back(static_cast<int32_t>(rng() % 256));
  for (formats::DType type : {formats::DType::Q4_0, formats::DType::Q4_1}) {
    const std::string what(formats::format_info(type).name);
    testing::TinyModelSpec spec;
    spec.matrix_type = type;
    spec.n_ff = 384;
    testing::write_tiny_model(path_, spec);
    model_ = model::Model::load(path_);
    const compress::SparsifyResult r = calibrate(Method::Teal, 0.5);
    const model::ActSparsity policy(*model_, r.table, 0.5, pool_);
    ASSERT_EQ(policy.layer(0).gate_up.n_rows, 2 * spec.n_ff) << what;
    model::Context by_neurons(*model_, 64, pool_, 64), separate(*model_, 64, pool_, 64);
    by_neurons.set_act_sparsity(&policy);
    separate.set_act_sparsity(&policy);
    int64_t calls = 0;
    separate.set_callback([&](std::string_view, int, const float*, int64_t, int64_t) { ++calls; });
    const int64_t nv = model_->hparams().n_vocab;
    int differ = 0;
    double scale = 0;
    for (int32_t t : tokens) {
      const auto a = by_neurons.decode({&t, 1});
      const std::vector<float> la(a.begin(), a.end());
      const auto b = separate.decode({&t, 1});
      double d = 0;
      for (int64_t i = 0; i < nv; ++i) {
        d = std::max(d, std::fabs(static_cast<double>(la[i]) - b[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
      }
      differ += d > 1e-3 * scale;
    }
    EXPECT_GT(calls, 0) << what;
    EXPECT_LE(differ, 1) << what;
    // Both counted the same activations (a flip would move a few).
    const auto ca = by_neurons.sparsity_counters(), cb = separate.sparsity_counters();
    for (int site = 0; site < sparsity::n_sites(Method::Teal); ++site) {
      EXPECT_NEAR(ca.density(site), cb.density(site), 0.01) << what << " site " << site;
      EXPECT_GT(ca.density(site), 0.3) << what << " site " << site;
      EXPECT_LT(ca.density(site), 0.7) << what << " site " << site;
    }
  }
}

// ReLU-fication: gate <= 0 dropped; the one-token skipping path computes what the batch path
// computes, and the model differs from the SiLU one.
TEST_F(ActSparsityTest, ReluDropsNonPositiveGates) {
  const compress::SparsifyResult r = calibrate(Method::Relu, 0.0);
  EXPECT_EQ(r.table.levels, std::vector<float>{0.0f});
  EXPECT_GT(r.heldout_density[0][0], 0.2);
  EXPECT_LT(r.heldout_density[0][0], 0.8);
  std::vector<int32_t> tokens;
  std::mt19937_64 rng(13);
  for (int i = 0; i < 24; ++i) tokens.push_back(static_cast<int32_t>(rng() % 256));
  std::vector<float> dense_one, dense_batch, one, batch;
  decode_both(*model_, nullptr, tokens, pool_, dense_one, dense_batch);
  double scale = 0;
  for (float v : dense_batch) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  const model::ActSparsity policy(*model_, r.table, 0.0, pool_);
  model::SparsityCounters c;
  decode_both(*model_, &policy, tokens, pool_, one, batch, &c);
  EXPECT_LT(max_abs_diff(one, batch), 2e-2 * scale);  // Q8_0 activation rounding, no thresholds
  EXPECT_GT(max_abs_diff(batch, dense_batch), 0.05 * scale);
  EXPECT_NEAR(c.density(0), r.heldout_density[0][0], 0.1);
}

// The gate-space cut equals the threshold on |SiLU(gate)| it replaces, on both sides of SiLU's
// dip (t below its depth 0.278: a kept interval of negative gates; above: none).
// CATS for one token reads gate whole (it decides), then only the kept neurons' rows of up and
// columns of down; the products count the bytes they read (SparsityCounters::block_bytes_read).
// F16 weights, so down's column layout has no scales and every byte is predictable from the
// kept counts: per token, the attention matrices and gate whole, plus per kept neuron one row
// of up and one column of down (n_embd halves). Logits as the batch path (dense up, zeroed).
TEST_F(ActSparsityTest, CatsOneTokenReadsOnlyTheKeptRowsOfUpAndColumnsOfDown) {
  testing::TinyModelSpec spec;
  spec.matrix_type = formats::DType::F16;
  testing::write_tiny_model(path_, spec);
  model_ = model::Model::load(path_);
  const compress::SparsifyResult r = calibrate(Method::Cats, 0.5);
  const model::ActSparsity policy(*model_, r.table, 0.5, pool_);
  model::Context ctx(*model_, 64, pool_, 64);
  ctx.set_act_sparsity(&policy);
  const auto& L0 = model_->layers[0];
  const auto bytes = [](const ops::WeightView& w) { return uint64_t(w.n_rows) * w.row_bytes; };
  const uint64_t whole = bytes(L0.wq) + bytes(L0.wk) + bytes(L0.wv) + bytes(L0.wo) + bytes(L0.ffn_gate);
  const uint64_t per_neuron = L0.ffn_up.row_bytes + 2 * uint64_t(spec.n_embd);
  const uint64_t dense = whole + bytes(L0.ffn_up) + bytes(L0.ffn_down);
  std::mt19937_64 rng(14);
  for (int i = 0; i < 24; ++i) {
    const model::SparsityCounters before = ctx.sparsity_counters();
    const int32_t t = static_cast<int32_t>(rng() % 256);
    ctx.decode({&t, 1});
    const model::SparsityCounters& after = ctx.sparsity_counters();
    const uint64_t kept = after.kept[sparsity::kGateAct] - before.kept[sparsity::kGateAct];
    EXPECT_EQ(after.block_bytes_read - before.block_bytes_read,
              spec.n_layer * whole + kept * per_neuron) << "token " << i;
    EXPECT_EQ(after.block_bytes_dense - before.block_bytes_dense, spec.n_layer * dense);
  }
  const double fraction = ctx.sparsity_counters().block_read_fraction();
  const double neurons = ctx.sparsity_counters().density(sparsity::kGateAct);
  EXPECT_GT(neurons, 0.3);
  EXPECT_LT(neurons, 0.7);
  EXPECT_NEAR(fraction, (whole + neurons * (dense - whole)) / double(dense), 1e-9);
}

TEST(GateInterval, EqualsTheSiluThreshold) {
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<float> u(-12.0f, 12.0f);
  for (float t : {0.0f, 0.01f, 0.1f, 0.2f, 0.27f, 0.2785f, 0.3f, 0.5f, 2.0f, 10.0f}) {
    model::SparseLayer S;
    model::set_gate_interval(S, t);
    for (int i = 0; i < 200000; ++i) {
      const float g = i < 1000 ? -1.2784645f + (i - 500) * 1e-3f : u(rng);
      ASSERT_EQ(S.keep_gate(g), !(std::fabs(model::silu_for_threshold(g)) < t))
          << "t " << t << " g " << g;
    }
    // The boundaries themselves.
    EXPECT_TRUE(S.keep_gate(S.keep_above)) << t;
    if (t > 0) {
      EXPECT_FALSE(S.keep_gate(std::nextafter(S.keep_above, 0.0f))) << t;
    }
  }
}

// The output head's sparsity (--head-sparsity): TEAL calibrates its thresholds with the others,
// they reach their density on held-back text, one token through the head's column layout
// computes what the dense head computes on the zeroed input, and it changes the model.
TEST_F(ActSparsityTest, HeadSparsityReachesItsDensityAndMatchesTheBatchPath) {
  testing::TinyModelSpec spec;
  spec.vocab_multiple = 32;  // the head's rows: a multiple of 32, so it has a column layout
  testing::write_tiny_model(path_, spec);
  model_ = model::Model::load(path_);
  const int64_t nv = model_->hparams().n_vocab;
  ASSERT_EQ(nv % 32, 0);
  const compress::SparsifyResult r = calibrate(Method::Teal, 0.5);
  ASSERT_EQ(r.table.head.size(), r.table.levels.size());
  EXPECT_EQ(r.table.head[0], 0.0f);
  for (size_t k = 1; k < r.table.levels.size(); ++k) ASSERT_GE(r.table.head[k], r.table.head[k - 1]);
  ASSERT_EQ(r.heldout_head_density.size(), 1u);
  EXPECT_NEAR(r.heldout_head_density[0], 0.5, 0.03);

  std::vector<int32_t> tokens;
  std::mt19937_64 rng(12);
  for (int i = 0; i < 24; ++i) tokens.push_back(static_cast<int32_t>(rng() % 256));
  const model::ActSparsity blocks(*model_, r.table, 0.5, pool_);
  const model::ActSparsity with_head(*model_, r.table, 0.5, pool_, 0.5);
  EXPECT_FALSE(blocks.head().on);
  ASSERT_TRUE(with_head.head().on);
  EXPECT_EQ(with_head.head().cols.n_rows, nv);
  EXPECT_EQ(with_head.n_dense_fallback(), 0);
  EXPECT_GT(with_head.bytes(), blocks.bytes());
  // The head alone (blocks at level 0): one token (the head's column layout, float) and the
  // batch (the dense head on the zeroed input, activations rounded to Q8_0) agree to that
  // rounding, and the head's sparsity changed the model.
  const model::ActSparsity head_only(*model_, r.table, 0.0, pool_, 0.5);
  const model::ActSparsity dense0(*model_, r.table, 0.0, pool_);
  std::vector<float> one, batch, d_one, d_batch;
  model::SparsityCounters c;
  decode_both(*model_, &head_only, tokens, pool_, one, batch, &c);
  decode_both(*model_, &dense0, tokens, pool_, d_one, d_batch);
  double scale = 0;
  for (float v : d_batch) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  EXPECT_LT(max_abs_diff(one, batch), 2e-2 * scale);
  EXPECT_GT(max_abs_diff(batch, d_batch), 0.02 * scale);
  EXPECT_GT(c.head_density(), 0.3);
  EXPECT_LT(c.head_density(), 0.7);
  EXPECT_EQ(c.head_seen, tokens.size() * static_cast<uint64_t>(model_->hparams().n_embd));
  // With the blocks at 0.5 too, a rounding-sized difference can flip activations across their
  // thresholds and the flips compound (the test above): the same top token, nearly always.
  decode_both(*model_, &with_head, tokens, pool_, one, batch);
  int agree = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    auto top = [&](const std::vector<float>& l) {
      return std::max_element(l.begin() + t * nv, l.begin() + (t + 1) * nv) - l.begin();
    };
    agree += top(one) == top(batch);
  }
  EXPECT_GE(agree, 21);
  // Level 0 zeroes nothing: the head is the dense one.
  const model::ActSparsity head0(*model_, r.table, 0.0, pool_, 0.0);
  decode_both(*model_, &head0, tokens, pool_, one, batch);
  EXPECT_EQ(batch, d_batch);

  // No head thresholds (an older file, or CATS): asking for the head is a clear error.
  sparsity::ThresholdTable no_head = r.table;
  no_head.head.clear();
  EXPECT_THROW((model::ActSparsity{*model_, no_head, 0.5, pool_, 0.5}), UsageError);
  EXPECT_THROW((model::ActSparsity{*model_, r.table, 0.5, pool_, 0.505}), UsageError);
  const compress::SparsifyResult cats = calibrate(Method::Cats, 0.5);
  EXPECT_TRUE(cats.table.head.empty());
  EXPECT_TRUE(cats.heldout_head_density.empty());
  EXPECT_THROW((model::ActSparsity{*model_, cats.table, 0.5, pool_, 0.5}), UsageError);
}

TEST_F(ActSparsityTest, MissingTableOrLevelIsAClearError) {
  EXPECT_THROW((model::ActSparsity{*model_, 0.5, pool_}), UsageError);  // no table in the file
  const compress::SparsifyResult r = calibrate(Method::Teal, 0.5);
  EXPECT_THROW((model::ActSparsity{*model_, r.table, 0.505, pool_}), UsageError);
  sparsity::ThresholdTable wrong = r.table;
  wrong.n_layer = 3;
  wrong.thresholds.resize(3 * wrong.sites() * wrong.levels.size());
  EXPECT_THROW((model::ActSparsity{*model_, wrong, 0.5, pool_}), FormatError);
}

}  // namespace
}  // namespace squeeze
