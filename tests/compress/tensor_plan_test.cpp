// Which tensors `squeeze quantize` converts and into what: llama-quantize's rules for a plain
// ("pure") run, checked by hand on names and shapes, and on the tiny model.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "compress/tensor_plan.h"
#include "core/error.h"
#include "tiny_model.h"

namespace squeeze::compress {
namespace {

namespace fs = std::filesystem;
using formats::DType;

gguf::TensorInfo tensor(std::string name, std::vector<int64_t> shape) {
  gguf::TensorInfo t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  return t;
}

TEST(TargetTypes, ParseNamesCaseInsensitively) {
  EXPECT_EQ(parse_target_type("q8_0").type, DType::Q8_0);
  EXPECT_EQ(parse_target_type("Q4_1").type, DType::Q4_1);
  EXPECT_EQ(parse_target_type("BF16").type, DType::BF16);
  EXPECT_EQ(target_types().size(), 8u);
}

TEST(TargetTypes, UnknownOrUnwritableTypesAreUsageErrors) {
  for (const char* bad : {"q9_0", "", "q4_K", "q8_1", "iq2_xxs"}) {
    try {
      parse_target_type(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("types: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(target_type(DType::Q6_K), UsageError);
}

// llama.h's enum llama_ftype.
TEST(TargetTypes, LlamaFileTypes) {
  const std::pair<const char*, uint32_t> expected[] = {
      {"f32", 0}, {"f16", 1}, {"q4_0", 2}, {"q4_1", 3}, {"q8_0", 7}, {"q5_0", 8}, {"q5_1", 9}, {"bf16", 32}};
  for (const auto& [name, ftype] : expected) EXPECT_EQ(parse_target_type(name).llama_ftype, ftype) << name;
}

TEST(TensorRules, DimsCountUpToTheLastDimensionAboveOne) {
  EXPECT_EQ(ggml_n_dims(tensor("a", {64})), 1);
  EXPECT_EQ(ggml_n_dims(tensor("a", {64, 1})), 1);
  EXPECT_EQ(ggml_n_dims(tensor("a", {64, 8})), 2);
  EXPECT_EQ(ggml_n_dims(tensor("a", {64, 1, 3})), 3);
  EXPECT_EQ(ggml_n_dims(tensor("a", {64, 8, 1, 1})), 2);
}

TEST(TensorRules, WeightMatricesOnly) {
  EXPECT_TRUE(allows_quantization(tensor("blk.0.attn_q.weight", {64, 64})));
  EXPECT_TRUE(allows_quantization(tensor("token_embd.weight", {64, 265})));
  EXPECT_TRUE(allows_quantization(tensor("output.weight", {64, 265})));
  EXPECT_TRUE(allows_quantization(tensor("blk.3.ffn_down_exps.weight", {128, 64, 8})));
  EXPECT_FALSE(allows_quantization(tensor("blk.0.attn_norm.weight", {64})));
  EXPECT_FALSE(allows_quantization(tensor("blk.0.attn_q.weight", {64, 1})));  // 1-D for ggml
  EXPECT_FALSE(allows_quantization(tensor("blk.0.attn_q.bias", {64, 64})));
  EXPECT_FALSE(allows_quantization(tensor("blk.0.attn_q_norm.weight", {64, 2})));
  EXPECT_FALSE(allows_quantization(tensor("blk.0.ffn_gate_inp.weight", {64, 8})));
  EXPECT_FALSE(allows_quantization(tensor("position_embd.weight", {64, 512})));
  EXPECT_FALSE(allows_quantization(tensor("blk.0.ssm_conv1d.weight", {4, 64})));
  EXPECT_FALSE(allows_quantization(tensor("v.patch_embd.weight", {14, 14, 3, 64})));
}

class PlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("squeeze_plan_" + std::to_string(::getpid()) + ".gguf")).string();
    testing::TinyModelSpec spec;
    spec.matrix_type = DType::Q8_0;
    spec.extra = [](gguf::Writer& w) {
      // A weight matrix whose rows (48) are not whole blocks of 32.
      w.add_tensor("blk.0.odd.weight", DType::F32, {48, 4}, std::vector<uint8_t>(48 * 4 * 4, 0));
    };
    testing::write_tiny_model(path_, spec);
  }
  void TearDown() override { fs::remove(path_); }
  const TensorPlan& find(const std::vector<TensorPlan>& plan, const std::string& name) {
    for (const TensorPlan& p : plan) {
      if (p.src->name == name) return p;
    }
    throw std::runtime_error("no tensor " + name);
  }
  std::string path_;
};

TEST_F(PlanTest, QuantizedTargetConvertsMatricesAndCopiesNorms) {
  const gguf::File f = gguf::File::open(path_);
  const auto plan = plan_conversion(f, DType::Q4_0);
  ASSERT_EQ(plan.size(), f.tensors().size());
  for (const char* name : {"token_embd.weight", "blk.0.attn_q.weight", "blk.1.ffn_down.weight"}) {
    EXPECT_EQ(find(plan, name).type, DType::Q4_0) << name;
    EXPECT_EQ(find(plan, name).action, TensorAction::Convert) << name;
    EXPECT_FALSE(find(plan, name).fallback) << name;
  }
  for (const char* name : {"output_norm.weight", "blk.0.attn_norm.weight", "blk.1.ffn_norm.weight"}) {
    EXPECT_EQ(find(plan, name).type, DType::F32) << name;
    EXPECT_EQ(find(plan, name).action, TensorAction::Copy) << name;
  }
  const TensorPlan& odd = find(plan, "blk.0.odd.weight");
  EXPECT_TRUE(odd.fallback);
  EXPECT_EQ(odd.type, DType::F16);
  EXPECT_EQ(odd.action, TensorAction::Convert);
}

TEST_F(PlanTest, SameTypeIsCopiedAndFloatTargetsNeedNoFallback) {
  const gguf::File f = gguf::File::open(path_);
  for (const TensorPlan& p : plan_conversion(f, DType::Q8_0)) {
    if (p.src->name != "blk.0.odd.weight") {
      EXPECT_EQ(p.action, TensorAction::Copy) << p.src->name;
    }
  }
  EXPECT_EQ(find(plan_conversion(f, DType::F16), "blk.0.odd.weight").type, DType::F16);
  EXPECT_FALSE(find(plan_conversion(f, DType::F16), "blk.0.odd.weight").fallback);
  EXPECT_EQ(find(plan_conversion(f, DType::F32), "blk.0.odd.weight").action, TensorAction::Copy);
  EXPECT_EQ(find(plan_conversion(f, DType::BF16), "blk.0.attn_k.weight").type, DType::BF16);
  EXPECT_EQ(dominant_weight_type(f), "q8_0");
}

TEST_F(PlanTest, UndecodableSourceIsAFormatError) {
  testing::TinyModelSpec spec;
  spec.extra = [](gguf::Writer& w) {
    w.add_tensor("blk.0.extra.weight", DType::Q5_K, {256, 2}, std::vector<uint8_t>(2 * 176, 0));
  };
  testing::write_tiny_model(path_, spec);
  const gguf::File f = gguf::File::open(path_);
  try {
    plan_conversion(f, DType::Q4_0);
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'blk.0.extra.weight' is q5_K, which squeeze cannot decode"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace squeeze::compress
