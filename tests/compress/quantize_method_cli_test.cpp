// `squeeze quantize --method rtn|gptq` through the binary, on the tiny model: the file it
// writes loads and carries its provenance, overrides pick the types asked for, and every bad
// option combination is one clear error before any work, with no file left behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_run.h"
#include "gguf/gguf.h"
#include "tiny_model_cli.h"

namespace squeeze {
namespace {

namespace fs = std::filesystem;
using testing::run_squeeze;

class QuantizeMethodCli : public testing::TinyModelCli {
 protected:
  QuantizeMethodCli() : TinyModelCli("qmethod") {}
  void SetUp() override {
    TinyModelCli::SetUp();
    short_ = (dir_ / "short.txt").string();
    std::ofstream(short_) << "too short";
  }
  std::string base() const { return "quantize -m " + model_ + " -t 2 "; }

  std::string short_;
};

TEST_F(QuantizeMethodCli, RtnWritesProvenanceAndFallsBackOnShortRows) {
  const std::string o = out("rtn.gguf");
  const auto r = run_squeeze(base() + "-o " + o + " --method rtn --bits 3 --group-size 128 --scale mse",
                             "qm_rtn");
  ASSERT_EQ(r.rc, 0) << r.err;
  // Rows of 64 (n_embd) cannot hold a group of 128: stored with groups of 64 and said so.
  EXPECT_NE(r.err.find("blk.0.attn_q.weight 3-bit g128 asym mse -> sq3_g64 (group 64: row of 64)"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("blk.0.ffn_down.weight 3-bit g128 asym mse -> sq3_g128"), std::string::npos)
      << r.err;
  const gguf::File f = gguf::File::open(o);
  EXPECT_EQ(f.require_string("squeeze.quantization.method"), "rtn");
  EXPECT_EQ(f.require_int("squeeze.quantization.bits"), 3);
  EXPECT_EQ(f.require_int("squeeze.quantization.group_size"), 128);
  EXPECT_EQ(f.require_string("squeeze.quantization.scale"), "mse");
  EXPECT_EQ(f.find("general.file_type"), nullptr);  // no llama.cpp file type describes sq3
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type, formats::DType::Q8_0);  // kept
  // The file runs.
  const auto g = run_squeeze("run -m " + o + " -p hello -n 4 --temp 0 --ctx 64", "qm_rtn_run");
  EXPECT_EQ(g.rc, 0) << g.err;
  const auto i = run_squeeze("inspect " + o, "qm_rtn_inspect");
  EXPECT_NE(i.out.find("squeeze.quantization.scale"), std::string::npos);
}

// A MoE model: RTN quantizes the stacked expert matrices row by row like the others; GPTQ,
// which would need each expert's routed inputs, refuses with one clear error.
TEST_F(QuantizeMethodCli, RtnQuantizesMoeExpertsAndGptqRefusesThem) {
  const std::string moe = out("moe.gguf");
  testing::write_tiny_model(moe, testing::tiny_arch_spec("qwen3moe"));
  const std::string o = out("moe_rtn.gguf");
  const auto r = run_squeeze("quantize -m " + moe + " -t 2 -o " + o + " --method rtn --bits 4 --group-size 32",
                             "qm_moe_rtn");
  ASSERT_EQ(r.rc, 0) << r.err;
  const gguf::File src = gguf::File::open(moe);
  const gguf::File f = gguf::File::open(o);
  for (const char* name : {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight"}) {
    ASSERT_NE(f.find_tensor(name), nullptr) << name;
    EXPECT_EQ(f.find_tensor(name)->type, formats::DType::Q4_1) << name;  // 4-bit g32 asym's layout
    EXPECT_EQ(f.find_tensor(name)->shape, src.find_tensor(name)->shape) << name;
    EXPECT_NE(r.err.find(std::string(name) + " 4-bit g32 asym"), std::string::npos) << r.err;
  }
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate_inp.weight")->type, src.find_tensor("blk.0.ffn_gate_inp.weight")->type);
  const auto g = run_squeeze("run -m " + o + " -p hello -n 4 --temp 0 --ctx 64", "qm_moe_run");
  EXPECT_EQ(g.rc, 0) << g.err;
  const std::string o2 = out("moe_gptq.gguf");
  const auto q = run_squeeze("quantize -m " + moe + " -t 2 -o " + o2 + " --method gptq --calib " + calib_,
                             "qm_moe_gptq");
  EXPECT_EQ(q.rc, 2) << q.err;
  EXPECT_NE(q.err.find("do not calibrate a MoE model's experts"), std::string::npos) << q.err;
  EXPECT_FALSE(fs::exists(o2));
}

TEST_F(QuantizeMethodCli, GptqRecordsCalibrationAndOverrides) {
  const std::string o = out("gptq.gguf");
  const auto r = run_squeeze(base() + "-o " + o + " --method gptq --bits 4 --group-size 32 --sym " +
                                 "--calib " + calib_ + " --calib-samples 4 --calib-ctx 32 --seed 3 " +
                                 "--tensor-type 'ffn_down=q8_0' --tensor-type 'blk\\.1\\.attn_v=keep' " +
                                 "--embd-type q4_0",
                             "qm_gptq");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("rel. output error"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mean relative output error on the calibration inputs: gptq"),
            std::string::npos) << r.err;
  const gguf::File f = gguf::File::open(o);
  EXPECT_EQ(f.require_string("squeeze.quantization.method"), "gptq");
  EXPECT_EQ(f.require_int("squeeze.quantization.calibration.samples"), 4);
  EXPECT_EQ(f.require_int("squeeze.quantization.calibration.ctx"), 32);
  EXPECT_EQ(f.require_int("squeeze.quantization.calibration.seed"), 3);
  EXPECT_EQ(f.require_string("squeeze.quantization.calibration.file"), "calib.txt");
  EXPECT_EQ(f.require_string("squeeze.quantization.calibration.fnv1a64").size(), 16u);
  EXPECT_EQ(f.require_int("general.file_type"), 2);  // every method matrix is q4_0
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, formats::DType::Q4_0);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->type, formats::DType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.1.attn_v.weight")->type, formats::DType::Q8_0);  // kept (source)
  EXPECT_EQ(f.find_tensor("blk.0.attn_v.weight")->type, formats::DType::Q4_0);
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type, formats::DType::Q4_0);
  const auto g = run_squeeze("run -m " + o + " -p hello -n 4 --temp 0 --ctx 64", "qm_gptq_run");
  EXPECT_EQ(g.rc, 0) << g.err;
}

TEST_F(QuantizeMethodCli, BadOptionsAreOneClearErrorBeforeAnyWork) {
  const std::string o = "-o " + out("bad.gguf") + " ";
  const std::string g = "--method gptq --calib " + calib_ + " ";
  const std::pair<std::string, std::string> cases[] = {
      {o + g + "--static-groups", "--static-groups only makes sense with --act-order"},
      {o + g + "--act-order --group-size 64", "needs --static-groups"},
      {o + "--method rtn --damp 0.1", "--damp is only used with --method gptq"},
      {o + "--method rtn --calib " + calib_, "--calib is only used with --method gptq"},
      {o + "--method rtn --percentile 99", "--percentile is only used with --scale percentile"},
      {o + "--method rtn --bits 5", "--bits must be 2, 3, 4 or 8"},
      {o + "--method rtn --group-size 48", "--group-size must be 32, 64, 128 or -1"},
      {o + "--method rtn --bits 8", "symmetric (--sym) with group size 32"},
      {o + "--method rtn --scale best", "unknown scale method 'best'"},
      {o + "--method awq", "unknown --method 'awq'"},
      {o + "--type q8_0 --method rtn", "excludes"},
      {o + "--type q8_0 --bits 3", "--bits is only used with --method"},
      {o, "give --type"},
      {o + "--method rtn --tensor-type '(=q8_0'", "bad regular expression"},
      {o + "--method rtn --tensor-type 'ffn=q9_9'", "unknown or unwritable tensor type 'q9_9'"},
      {o + "--method rtn --tensor-type ffn", "REGEX=TYPE"},
      {o + "--method rtn --embd-type q8_k", "unknown or unwritable tensor type"},
      {o + "--method gptq --calib " + out("missing.txt"), "cannot read calibration text"},
      {o + g + "--damp 2", "--damp must be in [0, 1]"},
      {o + g + "--calib-ctx 4096", "--calib-ctx 4096 exceeds the model's 128 tokens"},
      {o + "--method gptq --calib-ctx 64 --calib " + short_, "fewer than one sample of 64"},
  };
  for (const auto& [args, needle] : cases) {
    SCOPED_TRACE(args);
    testing::expect_clean_error(run_squeeze(base() + args, "qm_bad"), needle);
  }
  EXPECT_EQ(n_files(), 3u);  // tiny.gguf, calib.txt and short.txt only
}

}  // namespace
}  // namespace squeeze
