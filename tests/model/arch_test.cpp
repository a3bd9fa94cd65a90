// The architecture table: lookup by name, the error for an unknown one, the manifest binding
// every layer matrix, and the parse of a tensor name into (layer, manifest entry).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>

#include <unistd.h>

#include "core/error.h"
#include "model/arch.h"
#include "model/context.h"
#include "model/model.h"
#include "model/names.h"
#include "tiny_model.h"

namespace squeeze::model {
namespace {

std::string tmp_path(const char* name) {
  return (std::filesystem::temp_directory_path() /
          ("squeeze_arch_" + std::to_string(::getpid()) + "_" + name + ".gguf"))
      .string();
}

// The FormatError that loading the tiny model of `spec` gives ("" when it loads).
std::string load_error_of(const testing::TinyModelSpec& spec) {
  const std::string path = tmp_path(spec.arch.c_str());
  testing::write_tiny_model(path, spec);
  std::string what;
  try {
    Model::load(path);
  } catch (const FormatError& e) {
    what = e.what();
  }
  std::filesystem::remove(path);
  return what;
}

TEST(Arch, FoundByNameAndUnknownNamesAreRefused) {
  ASSERT_NE(find_arch("llama"), nullptr);
  EXPECT_EQ(find_arch("llama")->name, "llama");
  ASSERT_NE(find_arch("gemma3"), nullptr);
  ASSERT_NE(find_arch("qwen2"), nullptr);
  ASSERT_NE(find_arch("qwen3"), nullptr);
  ASSERT_NE(find_arch("qwen3moe"), nullptr);
  EXPECT_EQ(find_arch("mixtral"), nullptr);
  EXPECT_EQ(find_arch(""), nullptr);
  EXPECT_EQ(supported_archs(), "llama, gemma3, qwen2, qwen3, qwen3moe");

  testing::TinyModelSpec spec;
  spec.skip_keys = {"general.architecture"};
  spec.extra = [](gguf::Writer& w) { w.add_string("general.architecture", "mamba"); };
  const std::string path = tmp_path("mamba");
  testing::write_tiny_model(path, spec);
  try {
    Model::load(path);
    FAIL() << "an unknown architecture loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "unsupported architecture 'mamba' (supported: llama, gemma3, qwen2, qwen3, qwen3moe)"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove(path);
}

// A gemma3 file whose metadata or tensors are missing or inconsistent: a FormatError naming
// the key or tensor. The tiny llama file relabelled, with the gemma3.* keys its loader reads.
TEST(Arch, Gemma3MetadataErrorsNameTheKey) {
  auto load_error = [](std::function<void(gguf::Writer&)> more, std::vector<std::string> skip) {
    testing::TinyModelSpec spec;
    spec.skip_keys = {"general.architecture"};
    spec.extra = [&](gguf::Writer& w) {
      w.add_string("general.architecture", "gemma3");
      const std::pair<const char*, uint32_t> keys[] = {
          {"block_count", 2},     {"context_length", 128},        {"embedding_length", 64},
          {"feed_forward_length", 128}, {"attention.head_count", 4}, {"attention.head_count_kv", 2}};
      for (const auto& [k, v] : keys) {
        if (std::find(skip.begin(), skip.end(), k) == skip.end()) {
          w.add_uint32(std::string("gemma3.") + k, v);
        }
      }
      w.add_float32("gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
      more(w);
    };
    return load_error_of(spec);
  };
  auto none = [](gguf::Writer&) {};
  EXPECT_NE(load_error(none, {"block_count"}).find("gemma3.block_count"), std::string::npos);
  // Every tensor of llama's layer is there, not Gemma's norms.
  EXPECT_NE(load_error(none, {}).find("blk.0.attn_q_norm.weight"), std::string::npos);
  const std::string pattern = load_error(
      [](gguf::Writer& w) {
        w.add_uint32("gemma3.attention.sliding_window", 512);
        w.add_int32("gemma3.attention.sliding_window_pattern", -3);
      },
      {});
  EXPECT_NE(pattern.find("gemma3.attention.sliding_window_pattern"), std::string::npos) << pattern;
  const std::string value_len = load_error(
      [](gguf::Writer& w) { w.add_uint32("gemma3.attention.value_length", 7); }, {});
  EXPECT_NE(value_len.find("gemma3.attention.value_length"), std::string::npos) << value_len;
}

// qwen2's biases, qwen3's head norms, qwen3moe's expert keys and tensors: a missing or
// misshapen one is a FormatError naming it.
TEST(Arch, QwenTensorErrorsNameTheTensor) {
  auto load_error = [](const testing::TinyModelSpec& spec) { return load_error_of(spec); };
  testing::TinyModelSpec qwen3 = testing::tiny_arch_spec("qwen3");
  qwen3.skip_tensors = {"blk.1.attn_k_norm.weight"};
  EXPECT_NE(load_error(qwen3).find("blk.1.attn_k_norm.weight"), std::string::npos);
  testing::TinyModelSpec qwen2 = testing::tiny_arch_spec("qwen2");
  qwen2.skip_tensors = {"blk.0.attn_v.bias"};
  qwen2.extra = [](gguf::Writer& w) {
    w.add_tensor("blk.0.attn_v.bias", formats::DType::F32, {7}, std::vector<uint8_t>(28));
  };
  EXPECT_NE(load_error(qwen2).find("blk.0.attn_v.bias"), std::string::npos);
  // Without biases a qwen2 file is still valid (llama.cpp requires them; squeeze does not).
  qwen2 = testing::tiny_arch_spec("qwen2");
  qwen2.qkv_bias = false;
  EXPECT_EQ(load_error(qwen2), "");

  // qwen3moe: the expert keys and the stacked expert tensors.
  testing::TinyModelSpec moe = testing::tiny_arch_spec("qwen3moe");
  EXPECT_EQ(load_error(moe), "");
  moe.skip_keys = {"qwen3moe.expert_count"};
  EXPECT_NE(load_error(moe).find("qwen3moe.expert_count"), std::string::npos);
  moe = testing::tiny_arch_spec("qwen3moe");
  moe.skip_keys = {"qwen3moe.expert_used_count"};
  moe.extra = [](gguf::Writer& w) { w.add_uint32("qwen3moe.expert_used_count", 9); };
  EXPECT_NE(load_error(moe).find("expert_used_count' (9) exceeds expert_count (8)"),
            std::string::npos);
  moe = testing::tiny_arch_spec("qwen3moe");
  moe.skip_tensors = {"blk.2.ffn_down_exps.weight"};
  moe.extra = [](gguf::Writer& w) {
    w.add_tensor("blk.2.ffn_down_exps.weight", formats::DType::F32, {32, 64, 7},
                 std::vector<uint8_t>(32 * 64 * 7 * 4));
  };
  const std::string shape = load_error(moe);
  EXPECT_NE(shape.find("'blk.2.ffn_down_exps.weight' has shape [32, 64, 7], expected [32, 64, 8]"),
            std::string::npos) << shape;
  moe = testing::tiny_arch_spec("qwen3moe");
  moe.skip_tensors = {"blk.1.ffn_gate_inp.weight"};
  EXPECT_NE(load_error(moe).find("blk.1.ffn_gate_inp.weight"), std::string::npos);
}

TEST(Arch, ManifestBindsEveryLayerMatrixWithItsShape) {
  const std::string path = tmp_path("tiny");
  testing::write_tiny_model(path);
  const auto m = Model::load(path);
  const HParams& hp = m->hparams();
  EXPECT_EQ(&m->arch(), find_arch("llama"));
  ASSERT_EQ(m->arch().layer_matrices.size(), 7u);
  size_t bytes = m->output.row_bytes * static_cast<size_t>(m->output.n_rows);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    for (const LayerMatrix& lm : m->arch().layer_matrices) {
      const ops::WeightView& w = m->layers[il].*lm.view;
      const std::string name = "blk." + std::to_string(il) + "." + std::string(lm.suffix);
      const gguf::TensorInfo* t = m->file().find_tensor(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(w.data, t->data) << name;
      EXPECT_EQ(w.n_cols, width(hp, lm.n_in)) << name;
      EXPECT_EQ(w.n_rows, width(hp, lm.n_out)) << name;
      bytes += t->n_bytes;
    }
  }
  EXPECT_EQ(m->weight_bytes(), bytes);
  std::filesystem::remove(path);
}

TEST(Arch, TensorNamesParseIntoLayerAndManifestEntry) {
  const Arch& a = *find_arch("llama");
  int64_t layer = 7;
  const LayerMatrix* lm = find_layer_matrix(a, "blk.12.ffn_up.weight", layer);
  ASSERT_NE(lm, nullptr);
  EXPECT_EQ(layer, 12);
  EXPECT_EQ(lm->suffix, "ffn_up.weight");
  EXPECT_EQ(lm->input, names::kFfnNorm);
  lm = find_layer_matrix(a, "blk.0.attn_output.weight", layer);
  ASSERT_NE(lm, nullptr);
  EXPECT_EQ(layer, 0);
  EXPECT_EQ(lm->input, names::kKqvOut);
  for (const char* other :
       {"token_embd.weight", "output.weight", "blk.3.attn_norm.weight", "blk..attn_q.weight",
        "blk.x.attn_q.weight", "blk.3.ffn_down_exps.weight", "blk.1234567890.attn_q.weight",
        "blk.3", "blk.", "xblk.3.attn_q.weight"}) {
    EXPECT_EQ(find_layer_matrix(a, other, layer), nullptr) << other;
    EXPECT_EQ(layer, -1) << other;
  }
}

// The llama family's optional attn_output.bias and ffn_down.bias (structured pruning's bias
// compensation writes them; llama.cpp's llama models read them): with one of them, layer 0's
// attention (or FFN) output is the one without plus the bias, on every row.
TEST(Arch, OutputBiasesAreAddedToTheirProjections) {
  const testing::TinyModelSpec plain;
  std::vector<float> bias(static_cast<size_t>(plain.n_embd));
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.01f * static_cast<float>(i) - 0.3f;
  ThreadPool pool(1);
  // Layer 0's output of `name` in the tiny model, with `bias_tensor` added when not empty.
  const auto output = [&](std::string_view name, const std::string& bias_tensor) {
    testing::TinyModelSpec spec;
    if (!bias_tensor.empty()) {
      spec.extra = [&](gguf::Writer& w) {
        w.add_tensor(bias_tensor, formats::DType::F32, {spec.n_embd},
                     {reinterpret_cast<const uint8_t*>(bias.data()), bias.size() * 4});
      };
    }
    const std::string path = tmp_path("bias");
    testing::write_tiny_model(path, spec);
    const auto m = Model::load(path);
    std::filesystem::remove(path);
    std::vector<float> y;
    Context c(*m, 16, pool, 1);
    c.set_callback([&](std::string_view n, int layer, const float* x, int64_t rows, int64_t width) {
      if (layer == 0 && n == name) y.insert(y.end(), x, x + rows * width);
    });
    c.decode(std::vector<int32_t>{5, 70, 100});
    return y;
  };
  for (const auto& [name, tensor] : {std::pair{names::kAttnOut, "blk.0.attn_output.bias"},
                                     std::pair{names::kFfnOut, "blk.0.ffn_down.bias"}}) {
    SCOPED_TRACE(tensor);
    const std::vector<float> without = output(name, ""), with = output(name, tensor);
    ASSERT_EQ(without.size(), static_cast<size_t>(3 * plain.n_embd));
    ASSERT_EQ(with.size(), without.size());
    for (size_t i = 0; i < with.size(); ++i) {
      EXPECT_NEAR(with[i], without[i] + bias[i % bias.size()], 1e-6f) << i;
    }
  }
}

}  // namespace
}  // namespace squeeze::model
