// `squeeze prune` through the binary, on the tiny model: the pruned file has the asked zeros in
// every pruned matrix, carries its provenance and runs; calibrated methods record their
// calibration; every bad option is one clear error before any work, with no file left behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli_run.h"
#include "core/cpu.h"
#include "formats/format.h"
#include "gguf/gguf.h"
#include "tiny_model_cli.h"

namespace squeeze {
namespace {

namespace fs = std::filesystem;
using testing::run_squeeze;

class PruneCli : public testing::TinyModelCli {
 protected:
  PruneCli() : TinyModelCli("prune") {}
  std::string base() const { return "prune -m " + model_ + " -t 2 "; }
  std::string calib() const { return "--calib " + calib_ + " --calib-samples 4 --calib-ctx 32 "; }
};

// Zeros in each span of a tensor's rows (span = the row for unstructured, m for N:M): the
// fewest found, and the total.
std::pair<int64_t, int64_t> zeros_per_span(const gguf::TensorInfo& t, int64_t span) {
  const int64_t cols = t.shape[0], rows = t.n_elements / cols;
  const size_t rb = formats::row_bytes(t.type, cols);
  std::vector<float> row(static_cast<size_t>(cols));
  int64_t fewest = span, total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    formats::kernels(t.type, Isa::Scalar)
        .dequantize_row(static_cast<const uint8_t*>(t.data) + r * rb, row.data(), cols);
    for (int64_t c = 0; c < cols; c += span) {
      const auto z = std::count(row.begin() + c, row.begin() + c + span, 0.0f);
      fewest = std::min<int64_t>(fewest, z);
      total += z;
    }
  }
  return {fewest, total};
}

TEST_F(PruneCli, MagnitudeZeroesHalfOfEveryRowAndRecordsIt) {
  const std::string o = out("mag.gguf");
  const auto r = run_squeeze(base() + "-o " + o + " --method magnitude --sparsity 0.5", "pr_mag");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("blk.0.attn_q.weight 8-bit g32 sym absmax -> q8_0, 50.0% zeros"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("50.00% of their weights zero"), std::string::npos) << r.err;
  const gguf::File f = gguf::File::open(o);
  EXPECT_EQ(f.require_string("squeeze.pruning.method"), "magnitude");
  EXPECT_EQ(f.require_string("squeeze.pruning.pattern"), "unstructured");
  EXPECT_EQ(f.require_int("squeeze.pruning.zeros") * 2, f.require_int("squeeze.pruning.weights"));
  EXPECT_EQ(f.find("squeeze.pruning.calibration.samples"), nullptr);  // magnitude needs none
  for (const char* name : {"blk.0.attn_q.weight", "blk.1.ffn_down.weight", "blk.0.ffn_up.weight"}) {
    const gguf::TensorInfo* t = f.find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type, formats::DType::Q8_0) << name;
    EXPECT_GE(zeros_per_span(*t, t->shape[0]).first, t->shape[0] / 2) << name;
  }
  // The embedding is not pruned: the source's bytes.
  const gguf::File src = gguf::File::open(model_);
  const gguf::TensorInfo* e = f.find_tensor("token_embd.weight");
  const gguf::TensorInfo* se = src.find_tensor("token_embd.weight");
  ASSERT_EQ(e->n_bytes, se->n_bytes);
  EXPECT_EQ(std::memcmp(e->data, se->data, e->n_bytes), 0);
  const auto g = run_squeeze("run -m " + o + " -p hello -n 4 --temp 0 --ctx 64", "pr_mag_run");
  EXPECT_EQ(g.rc, 0) << g.err;
  const auto i = run_squeeze("inspect " + o, "pr_mag_inspect");
  EXPECT_NE(i.out.find("squeeze.pruning.method"), std::string::npos) << i.out;
}

TEST_F(PruneCli, WandaNmRecordsItsCalibration) {
  const std::string o = out("wanda.gguf");
  const auto r = run_squeeze(base() + "-o " + o + " --method wanda --pattern 2:4 " + calib() +
                                 "--tensor-type 'blk\\.1\\.attn_v=keep'",
                             "pr_wanda");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("mean relative output error on the calibration inputs: wanda"),
            std::string::npos) << r.err;
  const gguf::File f = gguf::File::open(o);
  EXPECT_EQ(f.require_string("squeeze.pruning.method"), "wanda");
  EXPECT_EQ(f.require_string("squeeze.pruning.pattern"), "n:m");
  EXPECT_EQ(f.require_int("squeeze.pruning.n"), 2);
  EXPECT_EQ(f.require_int("squeeze.pruning.m"), 4);
  EXPECT_EQ(f.require_int("squeeze.pruning.calibration.samples"), 4);
  EXPECT_EQ(f.require_int("squeeze.pruning.calibration.ctx"), 32);
  EXPECT_EQ(f.find("squeeze.quantization.calibration.samples"), nullptr);
  const gguf::TensorInfo* q = f.find_tensor("blk.0.attn_q.weight");
  EXPECT_GE(zeros_per_span(*q, 4).first, 2);
  // A kept tensor is the source's, unpruned.
  EXPECT_EQ(f.find_tensor("blk.1.attn_v.weight")->type, gguf::File::open(model_).find_tensor("blk.1.attn_v.weight")->type);
}

TEST_F(PruneCli, SparseGptJointWithFourBitsIsAPlainQ4_0File) {
  const std::string o = out("sgpt.gguf");
  const auto r = run_squeeze(base() + "-o " + o + " --method sparsegpt --sparsity 0.5 --bits 4 " +
                                 calib(),
                             "pr_sgpt");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("rel. output error"), std::string::npos) << r.err;
  const gguf::File f = gguf::File::open(o);
  EXPECT_EQ(f.require_string("squeeze.pruning.method"), "sparsegpt");
  EXPECT_EQ(f.require_string("squeeze.quantization.method"), "gptq");
  EXPECT_EQ(f.require_int("general.file_type"), 2);  // every pruned matrix is q4_0
  EXPECT_EQ(f.require_int("squeeze.pruning.zeros") * 2, f.require_int("squeeze.pruning.weights"));
  const gguf::TensorInfo* t = f.find_tensor("blk.0.ffn_down.weight");
  EXPECT_EQ(t->type, formats::DType::Q4_0);
  EXPECT_GE(zeros_per_span(*t, t->shape[0]).second * 2, t->n_elements);
  const auto g = run_squeeze("run -m " + o + " -p hello -n 4 --temp 0 --ctx 64", "pr_sgpt_run");
  EXPECT_EQ(g.rc, 0) << g.err;
}

TEST_F(PruneCli, OwlAndLayerSparsitySetEachLayersFraction) {
  const std::string o = out("owl.gguf");
  const auto r = run_squeeze(base() + "-o " + o + " --method wanda --sparsity 0.5 --owl " +
                                 "--owl-m 3 --owl-lambda 0.1 " + calib(),
                             "pr_owl");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("owl: layer 1 outliers"), std::string::npos) << r.err;
  const gguf::File f = gguf::File::open(o);
  EXPECT_NEAR(f.require_float("squeeze.pruning.owl.lambda"), 0.1, 1e-6);
  const std::vector<float> s = f.get_float_array("squeeze.pruning.layer_sparsity");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_NEAR((s[0] + s[1]) / 2, 0.5, 1e-6);
  EXPECT_NEAR(std::fabs(s[0] - s[1]), 0.2, 1e-6);  // two layers: the whole spread
  const std::string o2 = out("layers.gguf");
  const auto r2 = run_squeeze(base() + "-o " + o2 + " --method magnitude --sparsity 0.5 " +
                                  "--layer-sparsity 1=0.25",
                              "pr_layers");
  ASSERT_EQ(r2.rc, 0) << r2.err;
  const gguf::File f2 = gguf::File::open(o2);
  const gguf::TensorInfo* q0 = f2.find_tensor("blk.0.ffn_up.weight");
  const gguf::TensorInfo* q1 = f2.find_tensor("blk.1.ffn_up.weight");
  EXPECT_GE(zeros_per_span(*q0, q0->shape[0]).first, q0->shape[0] / 2);
  EXPECT_GE(zeros_per_span(*q1, q1->shape[0]).first, q1->shape[0] / 4);
  EXPECT_LT(zeros_per_span(*q1, q1->shape[0]).second, q1->n_elements / 3);
}

// --packed stores the same codes without the zeros: the file is smaller, and on the AVX-512
// tiers (block order, both formats) the model computes the same bits as the dense q8_0 file.
TEST_F(PruneCli, PackedIsTheDenseFileWithoutItsZeros) {
  const std::string dense = out("dense.gguf"), packed = out("packed.gguf");
  const std::string args = " --method magnitude --pattern 2:4";
  ASSERT_EQ(run_squeeze(base() + "-o " + dense + args, "pr_dense").rc, 0);
  const auto r = run_squeeze(base() + "-o " + packed + args + " --packed", "pr_packed");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("packed as sp8_50"), std::string::npos) << r.err;
  const gguf::File fd = gguf::File::open(dense), fp = gguf::File::open(packed);
  EXPECT_EQ(fp.require_string("squeeze.pruning.storage"), "sp8_50");
  EXPECT_EQ(fd.require_string("squeeze.pruning.storage"), "dense");
  EXPECT_EQ(fp.find("general.file_type"), nullptr);  // no llama.cpp type describes it
  for (const char* name : {"blk.0.attn_q.weight", "blk.1.ffn_down.weight"}) {
    const gguf::TensorInfo* d = fd.find_tensor(name);
    const gguf::TensorInfo* p = fp.find_tensor(name);
    EXPECT_EQ(p->type, formats::DType::SP8_50) << name;
    EXPECT_EQ(p->n_bytes * 34, d->n_bytes * 22) << name;
    std::vector<float> a(static_cast<size_t>(d->n_elements)), b(a.size());
    formats::kernels(d->type, Isa::Scalar).dequantize_row(d->data, a.data(), d->n_elements);
    formats::kernels(p->type, Isa::Scalar).dequantize_row(p->data, b.data(), p->n_elements);
    EXPECT_EQ(a, b) << name;
  }
  if (cpu_has_avx512_vbmi2()) {
    const std::string ppl = " -f " + calib_ + " --ctx 64 --chunks 3";
    const auto a = run_squeeze("perplexity -m " + dense + ppl, "pr_ppl_dense");
    const auto b = run_squeeze("perplexity -m " + packed + ppl, "pr_ppl_packed");
    ASSERT_EQ(a.rc, 0) << a.err;
    ASSERT_EQ(b.rc, 0) << b.err;
    const auto final_line = [](const std::string& text) {
      const size_t at = text.find("PPL = ");
      return at == std::string::npos ? text : text.substr(at, text.find('\n', at) - at);
    };
    EXPECT_EQ(final_line(a.out + a.err), final_line(b.out + b.err));
  }
  // A block that does not keep exactly 16 weights is a corrupt file: one clear error.
  const gguf::TensorInfo* t = fp.find_tensor("blk.0.attn_q.weight");
  const std::string bad = out("bad_mask.gguf");
  fs::copy_file(packed, bad);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fp.data_offset() + t->offset));
    const char flipped = static_cast<char>(static_cast<const uint8_t*>(t->data)[0] ^ 1);
    f.write(&flipped, 1);
  }
  testing::expect_clean_error(run_squeeze("run -m " + bad + " -p hi -n 1", "pr_bad_mask"),
                              "does not keep exactly 16 weights");
}

TEST_F(PruneCli, StructuredFfnWritesASmallerModelThatRuns) {
  const std::string o = out("ffn.gguf");
  const auto r = run_squeeze(base() + "-o " + o + " --method taylor --structure ffn --sparsity 0.5 " +
                                 calib(),
                             "pr_ffn");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("ffn: 128 -> 64 neurons per layer"), std::string::npos) << r.err;
  const gguf::File f = gguf::File::open(o);
  EXPECT_EQ(f.require_int("llama.feed_forward_length"), 64);
  EXPECT_EQ(f.require_string("squeeze.pruning.method"), "taylor");
  EXPECT_EQ(f.require_int("squeeze.pruning.calibration.samples"), 4);
  const auto g = run_squeeze("run -m " + o + " -p hello -n 4 --temp 0 --ctx 64", "pr_ffn_run");
  EXPECT_EQ(g.rc, 0) << g.err;
}

TEST_F(PruneCli, StructuredHeadsAndLayersWriteSmallerModelsThatRun) {
  const std::string heads = out("heads.gguf"), layers = out("layers.gguf");
  const auto h = run_squeeze(base() + "-o " + heads + " --method wanda --structure heads --sparsity 0.5 " +
                                 calib(),
                             "pr_heads");
  ASSERT_EQ(h.rc, 0) << h.err;
  EXPECT_NE(h.err.find("heads: 2 -> 1 KV groups per layer"), std::string::npos) << h.err;
  EXPECT_EQ(gguf::File::open(heads).require_int("llama.attention.head_count"), 2);
  const auto l = run_squeeze(base() + "-o " + layers + " --method bi --structure layers --sparsity 0.5 " +
                                 calib(),
                             "pr_layers");
  ASSERT_EQ(l.rc, 0) << l.err;
  EXPECT_NE(l.err.find("layers: 2 -> 1 layers ("), std::string::npos) << l.err;
  const gguf::File f = gguf::File::open(layers);
  EXPECT_EQ(f.require_int("llama.block_count"), 1);
  EXPECT_EQ(f.require_string("squeeze.pruning.method"), "bi");
  for (const std::string& m : {heads, layers}) {
    const auto g = run_squeeze("run -m " + m + " -p hello -n 4 --temp 0 --ctx 64", "pr_struct_run");
    EXPECT_EQ(g.rc, 0) << g.err;
  }
}

TEST_F(PruneCli, BadOptionsAreOneClearErrorBeforeAnyWork) {
  const std::string o = "-o " + out("bad.gguf") + " ";
  const std::pair<std::string, std::string> cases[] = {
      {o + "--sparsity 0.5", "--method is required"},
      {o + "--method magnitude", "give --sparsity F or --pattern N:M"},
      {o + "--method obs --sparsity 0.5", "unknown pruning method 'obs'"},
      {o + "--method magnitude --sparsity 1", "--sparsity must be in (0, 1)"},
      {o + "--method magnitude --sparsity 0.5 --pattern 2:4", "excludes"},
      {o + "--method magnitude --pattern 4:4", "1 <= N < M"},
      {o + "--method magnitude --pattern 2:5", "M to divide 128"},
      {o + "--method magnitude --pattern two", "--pattern wants N:M"},
      {o + "--method magnitude --pattern 2:128", "do not split into groups of 128"},
      {o + "--method magnitude --sparsity 0.5 --calib " + calib_, "--calib is only used by --method wanda or sparsegpt"},
      {o + "--method wanda --sparsity 0.5 --damp 0.1", "--damp is only used by --method sparsegpt"},
      {o + "--method magnitude --sparsity 0.5 --bits 5", "--bits must be 2, 3, 4 or 8"},
      {o + "--method magnitude --sparsity 0.5 --scale kl", "pruning takes absmax or mse"},
      {o + "--method wanda --sparsity 0.5 --calib " + out("missing.txt"), "cannot read calibration text"},
      {o + "--method magnitude --pattern 2:4 --owl", "set the fractions of unstructured pruning"},
      {o + "--method magnitude --sparsity 0.5 --owl --layer-sparsity 0=0.2", "give one"},
      {o + "--method magnitude --sparsity 0.5 --owl-m 3", "--owl-m needs --owl"},
      {o + "--method magnitude --sparsity 0.5 --owl --owl-lambda 0.7", "--owl-lambda in [0, 0.5)"},
      {o + "--method magnitude --sparsity 0.5 --layer-sparsity 2=0.3", "not a range of layers 0..1"},
      {o + "--method magnitude --sparsity 0.5 --layer-sparsity 1", "RANGES=F"},
      {o + "--method magnitude --sparsity 0.5 --packed", "it needs --pattern N:M with N >= M / 2"},
      {o + "--method magnitude --pattern 1:4 --packed", "it needs --pattern N:M with N >= M / 2"},
      {o + "--method magnitude --pattern 32:64 --packed", "M dividing 32"},
      {o + "--method magnitude --pattern 2:4 --packed --bits 4", "--bits 8 --group-size 32"},
      {o + "--method magnitude --structure rows --sparsity 0.5", "--structure: ffn, heads or layers"},
      {o + "--method wanda --structure layers --sparsity 0.5", "ranks layers by --method bi (got 'wanda')"},
      {o + "--method bi --structure layers --sparsity 0.1", "removes none of the 2 layers"},
      {o + "--method magnitude --structure heads --sparsity 0.2", "removes none of the 2 KV groups"},
      {o + "--method bi --structure heads --sparsity 0.5", "ranks units by magnitude, wanda or flap (got 'bi')"},
      {o + "--method taylor --structure heads --sparsity 0.5", "ranks units by magnitude, wanda or flap (got 'taylor')"},
      {o + "--method magnitude --structure ffn --sparsity 0.5 --packed", "--packed does not apply to --structure ffn"},
      {o + "--method magnitude --structure ffn --pattern 2:4", "--pattern does not apply to --structure ffn"},
      {o + "--method magnitude --structure ffn", "give --sparsity F"},
      {o + "--method sparsegpt --structure ffn --sparsity 0.5", "ranks units by magnitude, wanda, flap or taylor (got 'sparsegpt')"},
      {o + "--method magnitude --structure ffn --sparsity 0.5 --calib " + calib_, "--calib is not used by --method magnitude"},
      {o + "--method magnitude --structure ffn --sparsity 0.01", "removes no whole group of 32"},
  };
  for (const auto& [args, needle] : cases) {
    SCOPED_TRACE(args);
    testing::expect_clean_error(run_squeeze(base() + args, "pr_bad"), needle);
  }
  EXPECT_EQ(n_files(), 2u);  // tiny.gguf and calib.txt only
}

}  // namespace
}  // namespace squeeze
