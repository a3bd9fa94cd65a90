// The forward pass on the real SmolLM2 model against llama.cpp's logits and greedy tokens
// (tests/data/forward_smollm2.json, made by tools/make_fixtures.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "model/context.h"
#include "require_file.h"

namespace squeeze::model {
namespace {

// Logit tolerance, as a fraction of the reference logit spread (max - min over the vocabulary)
// at the last prompt position. squeeze reproduces the arithmetic of llama.cpp's AVX2 build
// (the fixtures' reference) bit for bit, so today the difference is exactly 0 on both kernel
// paths; the tolerance is what an engine that rounds activations to 8 bits like llama.cpp but
// sums in another order can be held to (~1% of the spread, measured), and greedy tokens may
// then differ only where llama.cpp itself had a near-tie.
constexpr double kLogitTolFraction = 0.01;

const std::string kModel = squeeze::testing::default_model();
const std::string kFixture = squeeze::testing::data_file("forward_smollm2.json");

nlohmann::json load_fixture() {
  std::ifstream in(kFixture);
  return nlohmann::json::parse(in);
}

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

class ForwardReference : public ::testing::Test {
 protected:
  void SetUp() override {
    SQUEEZE_REQUIRE_FILE(kModel);
    SQUEEZE_REQUIRE_FILE(kFixture);
    model_ = Model::load(kModel);
    fixture_ = load_fixture();
  }
  std::unique_ptr<Model> model_;
  nlohmann::json fixture_;
};

TEST_F(ForwardReference, TopLogitsMatchLlamaCpp) {
  ThreadPool pool(2);
  for (const auto& c : fixture_["cases"]) {
    Context ctx(*model_, 512, pool);
    const std::vector<int32_t> ids = c["prompt_ids"];
    std::span<const float> logits = ctx.decode(ids);
    const double spread = c["logit_max"].get<double>() - c["logit_min"].get<double>();
    const double tol = kLogitTolFraction * spread;
    double max_diff = 0;
    for (size_t i = 0; i < c["top_ids"].size(); ++i) {
      const int32_t id = c["top_ids"][i];
      max_diff = std::max(max_diff, std::abs(logits[id] - c["top_logits"][i].get<double>()));
    }
    EXPECT_LE(max_diff, tol) << c["prompt"];
    EXPECT_EQ(argmax(logits), c["top_ids"][0].get<int32_t>()) << c["prompt"];
    std::printf("  top-20 max |diff| %.4f (tolerance %.4f, spread %.2f)\n", max_diff, tol, spread);
  }
}

TEST_F(ForwardReference, GreedyContinuationMatchesLlamaCpp) {
  ThreadPool pool(2);
  int near_tie_divergences = 0;
  for (const auto& c : fixture_["cases"]) {
    Context ctx(*model_, 512, pool);
    const std::vector<int32_t> ids = c["prompt_ids"];
    const std::vector<int32_t> ref = c["greedy"];
    const std::vector<double> gaps = c["greedy_top2_gap"];
    const double tol = kLogitTolFraction * (c["logit_max"].get<double>() - c["logit_min"].get<double>());
    std::span<const float> logits = ctx.decode(ids);
    for (size_t i = 0; i < ref.size(); ++i) {
      const int32_t tok = argmax(logits);
      if (tok != ref[i]) {
        // Acceptable only where llama.cpp itself had a near-tie, and in one prompt at most.
        EXPECT_LT(gaps[i], tol) << c["prompt"] << " diverges at step " << i
                                << " where the reference top-2 gap is " << gaps[i];
        ++near_tie_divergences;
        std::printf("  near-tie divergence at step %zu (reference gap %.4f < %.4f)\n", i, gaps[i], tol);
        break;
      }
      const int32_t one[1] = {tok};
      logits = ctx.decode(one);
    }
  }
  EXPECT_LE(near_tie_divergences, 1);
}

}  // namespace
}  // namespace squeeze::model
