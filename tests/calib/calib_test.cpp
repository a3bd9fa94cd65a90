// The calibration runner against direct computations: its block-by-block pass sees the
// activations of a whole forward pass, its block loop equals collect / advance by hand, and
// calibration windows are seeded and start with BOS.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "calib/calib.h"
#include "core/error.h"
#include "model/context.h"
#include "tiny_model.h"

namespace squeeze::calib {
namespace {

// Each test on the tiny random model, written to a file of its own.
class CalibratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("squeeze_calib_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf"))
                .string();
    testing::write_tiny_model(path_);
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_;
};

// The runner's block-by-block pass sees the same activations as a whole forward pass.
TEST_F(CalibratorTest, HessiansMatchAFullForwardPass) {
  auto m = model::Model::load(path_);
  const auto& hp = m->hparams();
  const int64_t ctx = 24;
  std::vector<std::vector<int32_t>> samples;
  std::mt19937_64 rng(29);
  for (int s = 0; s < 3; ++s) {
    std::vector<int32_t> t(ctx);
    for (auto& v : t) v = static_cast<int32_t>(rng() % hp.n_vocab);
    samples.push_back(t);
  }
  // Reference: Σ x xᵀ of every named input over full forward passes.
  std::vector<std::vector<double>> ref(hp.n_layer * 4);
  const char* names[4] = {"attn_norm", "kqv_out", "ffn_norm", "ffn_act"};
  ThreadPool pool(2);
  {
    model::Context c(*m, ctx, pool, ctx);
    c.set_callback([&](std::string_view name, int il, const float* x, int64_t n, int64_t width) {
      for (int k = 0; k < 4; ++k) {
        if (name != names[k] || il < 0) continue;
        auto& h = ref[il * 4 + k];
        h.resize(static_cast<size_t>(width * width), 0.0);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t i = 0; i < width; ++i) {
            for (int64_t j = 0; j < width; ++j) {
              h[i * width + j] += static_cast<double>(x[t * width + i]) * x[t * width + j];
            }
          }
        }
      }
    });
    for (const auto& s : samples) {
      c.reset();
      c.decode(s);
    }
  }
  Calibrator cal(*m, samples, pool);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    BlockHessians bh;
    ASSERT_TRUE(cal.collect(il, bh, nullptr, nullptr));
    EXPECT_EQ(bh.n_tokens, 3 * ctx);
    EXPECT_EQ(bh.entries.size(), 4u);
    const std::vector<double>* got[4];
    for (int k = 0; k < 4; ++k) got[k] = &bh.of(names[k]);
    for (int k = 0; k < 4; ++k) {
      ASSERT_EQ(got[k]->size(), ref[il * 4 + k].size()) << names[k];
      // Each sample's product is summed in float (ssyrk): compare at float precision,
      // relative to the scale of the row and column (off-diagonals may cancel).
      const auto& r = ref[il * 4 + k];
      const auto w = static_cast<int64_t>(std::sqrt(static_cast<double>(r.size())));
      for (int64_t i = 0; i < w; ++i) {
        for (int64_t j = 0; j < w; ++j) {
          ASSERT_NEAR((*got[k])[i * w + j], r[i * w + j],
                      1e-5 * std::sqrt(r[i * w + i] * r[j * w + j]) + 1e-12)
              << "layer " << il << " " << names[k] << " at " << i << "," << j;
        }
      }
    }
    ASSERT_TRUE(cal.advance(il, nullptr, nullptr));
  }
}

TEST_F(CalibratorTest, SamplesAreSeededWindowsStartingWithBos) {
  auto m = model::Model::load(path_);
  tokenizer::Tokenizer tok(tokenizer::read_vocab(m->file()));
  std::string text;
  for (int i = 0; i < 200; ++i) text += "word" + std::to_string(i) + " ";
  const CalibSamples a = sample_calibration_text(text, tok, 4, 16, 7);
  const CalibSamples b = sample_calibration_text(text, tok, 4, 16, 7);
  const CalibSamples c = sample_calibration_text(text, tok, 4, 16, 8);
  ASSERT_EQ(a.samples.size(), 4u);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_NE(a.samples, c.samples);
  for (const auto& s : a.samples) {
    EXPECT_EQ(s.size(), 16u);
    EXPECT_EQ(s[0], tok.bos());
  }
  EXPECT_EQ(a.text_hash, fnv1a64_hex(text));
  EXPECT_EQ(fnv1a64_hex(""), "cbf29ce484222325");
  EXPECT_THROW(sample_calibration_text("ab", tok, 1, 64, 0), UsageError);
}

// The block loop hands apply each block in order with the Hessians that collect gives after
// advancing by hand through the blocks before it, and stops without calling apply on cancel.
TEST_F(CalibratorTest, BlockLoopEqualsCollectAndAdvanceByHand) {
  auto m = model::Model::load(path_);
  const int64_t n_layer = m->hparams().n_layer;
  std::vector<std::vector<int32_t>> samples;
  std::mt19937_64 rng(5);
  for (int s = 0; s < 2; ++s) {
    std::vector<int32_t> t(16);
    for (auto& v : t) v = static_cast<int32_t>(rng() % m->hparams().n_vocab);
    samples.push_back(t);
  }
  ThreadPool pool(2);
  std::vector<BlockHessians> by_hand(static_cast<size_t>(n_layer));
  {
    Calibrator cal(*m, samples, pool);
    for (int64_t il = 0; il < n_layer; ++il) {
      ASSERT_TRUE(cal.collect(il, by_hand[il], nullptr, nullptr));
      ASSERT_TRUE(cal.advance(il, nullptr, nullptr));
    }
  }
  Calibrator cal(*m, samples, pool);
  std::vector<int64_t> order;
  int64_t reports = 0;
  ASSERT_TRUE(cal.for_each_block(
      [&](int64_t il, const BlockHessians& h) {
        order.push_back(il);
        ASSERT_EQ(h.entries.size(), by_hand[il].entries.size());
        for (size_t e = 0; e < h.entries.size(); ++e) {
          EXPECT_EQ(h.entries[e].input, by_hand[il].entries[e].input);
          EXPECT_EQ(h.entries[e].h, by_hand[il].entries[e].h) << "layer " << il;
        }
      },
      [&](int64_t, const char*, int64_t, int64_t) { ++reports; }, nullptr));
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1}));
  // hessians for every block, forward for all but the last: one report a sample each
  EXPECT_EQ(reports, (2 * n_layer - 1) * 2);

  std::atomic<bool> cancel{true};
  bool applied = false;
  EXPECT_FALSE(cal.for_each_block([&](int64_t, const BlockHessians&) { applied = true; }, nullptr,
                                  &cancel));
  EXPECT_FALSE(applied);
}

}  // namespace
}  // namespace squeeze::calib
