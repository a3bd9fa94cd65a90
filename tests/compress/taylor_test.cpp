// The Taylor criterion's gradients against finite differences of the loss they are the
// gradient of. For the last block the frozen-later-blocks loss is the model's own next-token
// loss, so its ffn_gate / ffn_up / ffn_down gradients must match central differences of the
// model's cross-entropy with one weight moved (f32 weights: no quantization in the way).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "compress/taylor.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/context.h"
#include "model/model.h"
#include "tiny_model.h"

namespace squeeze::compress {
namespace {

const std::vector<int32_t> kTokens = {5, 70, 100, 3, 200, 150, 9, 11, 255, 42, 17, 99};

// Σ over t < T - 1 of -log p(token t + 1 | ..t).
double loss(const model::Model& m, ThreadPool& pool) {
  model::Context ctx(m, 32, pool, 32);
  const std::span<const float> l = ctx.decode(kTokens, true);
  const auto V = static_cast<int64_t>(l.size() / kTokens.size());
  double sum = 0.0;
  for (size_t t = 0; t + 1 < kTokens.size(); ++t) {
    const float* row = l.data() + t * V;
    const double mx = *std::max_element(row, row + V);
    double z = 0.0;
    for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
    sum -= row[kTokens[t + 1]] - mx - std::log(z);
  }
  return sum;
}

TEST(Taylor, LastBlockGradientsMatchFiniteDifferences) {
  const testing::TinyModelSpec spec = testing::tiny_arch_spec("llama");  // f32 weights
  const gguf::Writer w = testing::tiny_model_writer(spec);
  const std::vector<uint8_t> bytes = w.to_bytes();
  const auto model = model::Model::load(gguf::File::from_bytes("tiny", bytes));
  ThreadPool pool(2);
  const FfnGradients g = ffn_loss_gradients(*model, {kTokens}, pool, nullptr, nullptr);
  const int64_t last = spec.n_layer - 1;
  const gguf::File file = gguf::File::from_bytes("tiny", bytes);
  for (const auto& [name, grad] : {std::pair{"ffn_down.weight", &g.down[last]},
                                   std::pair{"ffn_gate.weight", &g.gate[last]},
                                   std::pair{"ffn_up.weight", &g.up[last]}}) {
    SCOPED_TRACE(name);
    const gguf::TensorInfo& t = *file.find_tensor("blk." + std::to_string(last) + "." + name);
    ASSERT_EQ(t.type, formats::DType::F32);
    ASSERT_EQ(grad->size(), static_cast<size_t>(t.n_elements));
    // The three weights of largest gradient.
    std::vector<size_t> order(grad->size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                      [&](size_t a, size_t b) { return std::fabs((*grad)[a]) > std::fabs((*grad)[b]); });
    const size_t off = static_cast<const uint8_t*>(t.data) - file.file_data();
    for (int k = 0; k < 3; ++k) {
      const size_t e = order[k];
      const float eps = 1e-2f;
      double l[2];
      for (int side = 0; side < 2; ++side) {
        std::vector<uint8_t> moved = bytes;
        float v;
        std::memcpy(&v, moved.data() + off + e * 4, 4);
        v += side == 0 ? eps : -eps;
        std::memcpy(moved.data() + off + e * 4, &v, 4);
        l[side] = loss(*model::Model::load(gguf::File::from_bytes("moved", moved)), pool);
      }
      const double fd = (l[0] - l[1]) / (2.0 * eps);
      EXPECT_NEAR((*grad)[e], fd, 0.03 * std::fabs(fd) + 1e-3) << "weight " << e;
    }
  }
  // Importance: the sum of |w · g| over each neuron's group, non-negative and not all zero.
  const std::vector<std::vector<double>> imp = ffn_taylor_importance(*model, g, pool);
  ASSERT_EQ(imp.size(), static_cast<size_t>(spec.n_layer));
  EXPECT_GT(*std::max_element(imp[last].begin(), imp[last].end()), 0.0);
}

TEST(Taylor, OtherArchitecturesAreRefused) {
  testing::TinyModelSpec spec = testing::tiny_arch_spec("qwen3moe");
  const gguf::Writer w = testing::tiny_model_writer(spec);
  const auto model = model::Model::load(gguf::File::from_bytes("tiny", w.to_bytes()));
  ThreadPool pool(1);
  EXPECT_THROW(ffn_loss_gradients(*model, {kTokens}, pool, nullptr, nullptr), UsageError);
}

}  // namespace
}  // namespace squeeze::compress
