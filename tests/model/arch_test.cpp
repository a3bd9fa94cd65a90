// The architecture table: lookup by name, the error for an unknown one, the manifest binding
// every layer matrix, and the parse of a tensor name into (layer, manifest entry).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <unistd.h>

#include "core/error.h"
#include "model/arch.h"
#include "model/names.h"
#include "tiny_model.h"

namespace squeeze::model {
namespace {

std::string tmp_path(const char* name) {
  return (std::filesystem::temp_directory_path() /
          ("squeeze_arch_" + std::to_string(::getpid()) + "_" + name + ".gguf"))
      .string();
}

TEST(Arch, FoundByNameAndUnknownNamesAreRefused) {
  ASSERT_NE(find_arch("llama"), nullptr);
  EXPECT_EQ(find_arch("llama")->name, "llama");
  EXPECT_EQ(find_arch("gemma3"), nullptr);
  EXPECT_EQ(find_arch(""), nullptr);
  EXPECT_EQ(supported_archs(), "llama");

  testing::TinyModelSpec spec;
  spec.skip_keys = {"general.architecture"};
  spec.extra = [](gguf::Writer& w) { w.add_string("general.architecture", "mamba"); };
  const std::string path = tmp_path("mamba");
  testing::write_tiny_model(path, spec);
  try {
    Model::load(path);
    FAIL() << "an unknown architecture loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported architecture 'mamba' (supported: llama)"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove(path);
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

}  // namespace
}  // namespace squeeze::model
