// `squeeze quantize --method` with --embd-type / --output-type on tied and untied tiny models:
// on a model without output.weight, --output-type sets token_embd.weight (the tied head), as
// llama-quantize does; which option wins (compress::type_rule); and the provenance records the
// types those tensors were given.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>

#include "cli_run.h"
#include "compress/quantize_model.h"
#include "gguf/gguf.h"
#include "tiny_model.h"

namespace squeeze {
namespace {

namespace fs = std::filesystem;
using formats::DType;
using testing::run_squeeze;

class QuantizeHeadType : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("squeeze_qhead_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    tied_ = (dir_ / "tied.gguf").string();
    testing::write_tiny_model(tied_);  // Q8_0 matrices, no output.weight
    testing::TinyModelSpec spec;
    spec.tied_output = false;
    untied_ = (dir_ / "untied.gguf").string();
    testing::write_tiny_model(untied_, spec);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Quantizes `model` with `options` (after --method rtn); returns the output path.
  std::string quantize(const std::string& model, const std::string& options, const std::string& tag,
                       std::string* err = nullptr) {
    const std::string o = (dir_ / (tag + ".gguf")).string();
    const auto r = run_squeeze("quantize -m " + model + " -t 2 -o " + o + " --method rtn " + options, tag);
    EXPECT_EQ(r.rc, 0) << r.err;
    if (err) *err = r.err;
    return o;
  }

  fs::path dir_;
  std::string tied_, untied_;
};

TEST_F(QuantizeHeadType, OutputTypeSetsTheTiedEmbedding) {
  std::string err;
  const gguf::File f(gguf::File::open(quantize(tied_, "--output-type q4_0", "tied_out", &err)));
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type, DType::Q4_0);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f.require_string("squeeze.quantization.embd_type"), "q4_0");
  EXPECT_EQ(f.require_string("squeeze.quantization.output_type"), "q4_0");
  EXPECT_EQ(f.get_bool("squeeze.quantization.tied_output"), std::optional<bool>(true));
  EXPECT_NE(err.find("convert token_embd.weight -> q4_0 (--output-type (tied head))"), std::string::npos)
      << err;
  // The file runs.
  const auto g = run_squeeze("run -m " + f.path() + " -p hello -n 4 --temp 0 --ctx 64", "qhead_run");
  EXPECT_EQ(g.rc, 0) << g.err;
}

TEST_F(QuantizeHeadType, DefaultsKeepAndSayWhat) {
  const gguf::File f(gguf::File::open(quantize(tied_, "", "tied_keep")));
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type, DType::Q8_0);
  EXPECT_EQ(f.require_string("squeeze.quantization.embd_type"), "keep");
  EXPECT_EQ(f.require_string("squeeze.quantization.output_type"), "keep");
  EXPECT_EQ(f.get_bool("squeeze.quantization.tied_output"), std::optional<bool>(true));
  // --embd-type on a tied model is the head's type too.
  const gguf::File e(gguf::File::open(quantize(tied_, "--embd-type q5_0", "tied_embd")));
  EXPECT_EQ(e.find_tensor("token_embd.weight")->type, DType::Q5_0);
  EXPECT_EQ(e.require_string("squeeze.quantization.embd_type"), "q5_0");
  EXPECT_EQ(e.require_string("squeeze.quantization.output_type"), "q5_0");
}

TEST_F(QuantizeHeadType, UntiedModelKeepsTheTwoApart) {
  const gguf::File f(gguf::File::open(quantize(untied_, "--output-type q4_0", "untied_out")));
  EXPECT_EQ(f.find_tensor("output.weight")->type, DType::Q4_0);
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type, DType::Q8_0);
  EXPECT_EQ(f.require_string("squeeze.quantization.embd_type"), "keep");
  EXPECT_EQ(f.require_string("squeeze.quantization.output_type"), "q4_0");
  EXPECT_EQ(f.get_bool("squeeze.quantization.tied_output"), std::optional<bool>(false));
  const gguf::File b(gguf::File::open(quantize(untied_, "--output-type q4_0 --embd-type q5_1", "untied_both")));
  EXPECT_EQ(b.find_tensor("output.weight")->type, DType::Q4_0);
  EXPECT_EQ(b.find_tensor("token_embd.weight")->type, DType::Q5_1);
}

// llama-quantize's order: --embd-type / --output-type on their own tensor before --tensor-type;
// a --tensor-type match before --output-type reaching token_embd.weight through the tie.
TEST_F(QuantizeHeadType, WhichOptionWins) {
  const gguf::File t(gguf::File::open(
      quantize(tied_, "--tensor-type token_embd=q5_0 --output-type q4_0", "tied_regex")));
  EXPECT_EQ(t.find_tensor("token_embd.weight")->type, DType::Q5_0);
  EXPECT_EQ(t.require_string("squeeze.quantization.output_type"), "q5_0");
  const gguf::File e(gguf::File::open(
      quantize(tied_, "--tensor-type token_embd=q5_0 --embd-type q4_1", "tied_regex_embd")));
  EXPECT_EQ(e.find_tensor("token_embd.weight")->type, DType::Q4_1);
  const gguf::File u(gguf::File::open(
      quantize(untied_, "--tensor-type output=q5_0 --output-type q4_0", "untied_regex")));
  EXPECT_EQ(u.find_tensor("output.weight")->type, DType::Q4_0);

  compress::QuantizeOptions o;
  o.output = compress::parse_type_choice("q4_0");
  EXPECT_EQ(compress::type_rule("token_embd.weight", true, o).source, "--output-type (tied head)");
  EXPECT_EQ(compress::type_rule("token_embd.weight", false, o).choice, nullptr);
  EXPECT_EQ(compress::type_rule("output.weight", false, o).source, "--output-type");
  EXPECT_EQ(compress::type_rule("blk.0.attn_q.weight", true, o).choice, nullptr);
}

TEST_F(QuantizeHeadType, BothOptionsOnATiedModelAreAnError) {
  const std::string o = (dir_ / "both.gguf").string();
  const auto r = run_squeeze("quantize -m " + tied_ + " -o " + o +
                                 " --method rtn --embd-type q4_0 --output-type q8_0",
                             "qhead_both");
  testing::expect_clean_error(r, "both would set token_embd.weight");
  EXPECT_FALSE(fs::exists(o));
}

}  // namespace
}  // namespace squeeze
