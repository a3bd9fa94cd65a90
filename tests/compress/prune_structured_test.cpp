// Structured FFN pruning against a reference built from other parts: the smaller model computes
// what the original computes with the removed neurons silenced (their ffn_gate rows zeroed), up
// to ffn_down's storage again as q8_0; the neurons removed are the lowest by the criterion,
// computed here from the decoded weights; the gate and up rows kept are the source's bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "compress/output.h"
#include "compress/prune_structured.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/format.h"
#include "gguf/gguf.h"
#include "model/context.h"
#include "model/model.h"
#include "tiny_model.h"

namespace squeeze::compress {
namespace {

namespace fs = std::filesystem;

std::vector<float> decoded(const gguf::TensorInfo& t) {
  const int64_t cols = t.shape[0], rows = t.n_elements / cols;
  std::vector<float> w(static_cast<size_t>(t.n_elements));
  const size_t rb = formats::row_bytes(t.type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    formats::kernels(t.type, Isa::Scalar)
        .dequantize_row(static_cast<const uint8_t*>(t.data) + r * rb, w.data() + r * cols, cols);
  }
  return w;
}

std::vector<float> logits(const model::Model& m, ThreadPool& pool) {
  model::Context ctx(m, 64, pool, 1);
  const std::vector<int32_t> prompt = {5, 70, 100, 3, 200, 150, 9, 11, 255, 42};
  const auto l = ctx.decode(prompt);
  return {l.begin(), l.end()};
}

TEST(PruneStructured, SmallerModelIsTheOriginalWithTheNeuronsSilenced) {
  const fs::path dir = fs::temp_directory_path() / ("squeeze_ffn_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string src_path = (dir / "tiny.gguf").string(), out_path = (dir / "ffn.gguf").string();
  testing::write_tiny_model(src_path);
  ThreadPool pool(2);
  FfnPruneOptions o;
  o.method = PruneMethod::Magnitude;
  o.fraction = 0.5;
  const FfnPruneStats st = prune_ffn_neurons(src_path, out_path, o, pool);
  const gguf::File src = gguf::File::open(src_path), out = gguf::File::open(out_path);
  const int64_t n_ff = st.n_ff_before, kept = st.n_ff_after, n_embd = src.find_tensor("blk.0.ffn_gate.weight")->shape[0];
  EXPECT_EQ(kept, n_ff / 2);
  EXPECT_EQ(out.require_int("llama.feed_forward_length"), kept);
  EXPECT_EQ(out.require_string("squeeze.pruning.structure"), "ffn");

  std::vector<uint8_t> silenced(src.file_data(), src.file_data() + src.file_size());
  const int64_t n_layer = src.require_int("llama.block_count");
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const gguf::TensorInfo& g = *src.find_tensor(p + "ffn_gate.weight");
    const gguf::TensorInfo& og = *out.find_tensor(p + "ffn_gate.weight");
    ASSERT_EQ(og.shape, (std::vector<int64_t>{n_embd, kept}));
    EXPECT_EQ(out.find_tensor(p + "ffn_down.weight")->shape, (std::vector<int64_t>{kept, n_embd}));
    // The criterion, from the decoded weights: the kept neurons are the top half.
    const std::vector<float> gw = decoded(g), uw = decoded(*src.find_tensor(p + "ffn_up.weight")),
                             dw = decoded(*src.find_tensor(p + "ffn_down.weight"));
    std::vector<double> score(static_cast<size_t>(n_ff), 0.0);
    for (int64_t j = 0; j < n_ff; ++j) {
      for (int64_t k = 0; k < n_embd; ++k) score[j] += std::fabs(gw[j * n_embd + k]) + std::fabs(uw[j * n_embd + k]);
      for (int64_t i = 0; i < n_embd; ++i) score[j] += std::fabs(dw[i * n_ff + j]);
    }
    std::vector<int64_t> order(static_cast<size_t>(n_ff));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
    std::vector<int64_t> keep(order.begin(), order.begin() + kept);
    std::sort(keep.begin(), keep.end());
    const size_t rb = formats::row_bytes(g.type, n_embd);
    for (int64_t r = 0; r < kept; ++r) {
      ASSERT_EQ(0, std::memcmp(static_cast<const uint8_t*>(og.data) + r * rb,
                               static_cast<const uint8_t*>(g.data) + keep[r] * rb, rb))
          << p << " row " << r;
    }
    // The reference: the removed neurons' gate rows zeroed (silu(0) * up = 0).
    const size_t off = static_cast<const uint8_t*>(g.data) - src.file_data();
    for (int64_t j = 0, r = 0; j < n_ff; ++j) {
      if (r < kept && keep[r] == j) {
        ++r;
        continue;
      }
      std::memset(silenced.data() + off + j * rb, 0, rb);
    }
  }
  const auto small = model::Model::load(out_path);
  const auto reference = model::Model::load(gguf::File::from_bytes("silenced", silenced));
  const std::vector<float> a = logits(*small, pool), b = logits(*reference, pool);
  ASSERT_EQ(a.size(), b.size());
  float scale = 0.0f, diff = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(b[i]));
    diff = std::max(diff, std::fabs(a[i] - b[i]));
  }
  EXPECT_LT(diff, 0.02f * scale) << "max |diff| " << diff << " of max |logit| " << scale;
  EXPECT_EQ(std::max_element(a.begin(), a.end()) - a.begin(), std::max_element(b.begin(), b.end()) - b.begin());
  fs::remove_all(dir);
}

TEST(PruneStructured, WidthKeptAndBadOptions) {
  EXPECT_EQ(ffn_width_kept(1536, 1.0 / 3), 1024);
  EXPECT_EQ(ffn_width_kept(1536, 0.99), 32);
  EXPECT_EQ(ffn_width_kept(128, 0.01), 128);
  ThreadPool pool(1);
  FfnPruneOptions o;
  o.method = PruneMethod::SparseGpt;
  EXPECT_THROW(prune_ffn_neurons("x.gguf", "y.gguf", o, pool), UsageError);
  o.method = PruneMethod::Magnitude;
  o.fraction = 1.0;
  EXPECT_THROW(prune_ffn_neurons("x.gguf", "y.gguf", o, pool), UsageError);
}

}  // namespace
}  // namespace squeeze::compress
