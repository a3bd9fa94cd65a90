// `squeeze sparsify` and `--act-sparsity` through the binary on the tiny model: the file it
// writes carries the table and its provenance and runs sparsified; bad options and files
// without thresholds are one clear error, with no file left behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <cstring>
#include <fstream>

#include "cli_run.h"
#include "gguf/gguf.h"
#include "sparsity/thresholds.h"
#include "tiny_model.h"

namespace squeeze {
namespace {

namespace fs = std::filesystem;
using testing::expect_clean_error;
using testing::run_squeeze;

class SparsifyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("squeeze_sparsify_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "tiny.gguf").string();
    testing::write_tiny_model(model_);
    calib_ = (dir_ / "calib.txt").string();
    std::ofstream c(calib_);
    for (int i = 0; i < 400; ++i) c << "The quick brown fox " << i << " jumps over the lazy dog.\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string out(const std::string& name) const { return (dir_ / name).string(); }
  std::string base() const {
    return "sparsify -m " + model_ + " -t 2 --calib " + calib_ +
           " --calib-samples 4 --calib-ctx 32 --heldout-samples 2 ";
  }
  std::string bare() const { return "sparsify -m " + model_ + " -t 2 --calib-ctx 32 "; }
  size_t n_files() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }

  fs::path dir_;
  std::string model_, calib_;
};

TEST_F(SparsifyCli, WritesTheTableAndRunsWithIt) {
  const std::string o = out("teal.gguf");
  const auto r = run_squeeze(base() + "-o " + o + " --method teal --sparsity 0.4,0.5", "sp_teal");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("density on 64 held-back tokens at sparsity 0.40"), std::string::npos)
      << r.err;
  const gguf::File f = gguf::File::open(o);
  const auto t = sparsity::ThresholdTable::read(f);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->method, sparsity::Method::Teal);
  EXPECT_FLOAT_EQ(t->default_level, 0.4f);
  EXPECT_EQ(t->levels.size(), 100u);
  EXPECT_EQ(f.require_string("squeeze.sparsity.calib.file"), "calib.txt");
  EXPECT_EQ(f.require_int("squeeze.sparsity.calib.samples"), 4);
  EXPECT_NE(r.err.find("density on 64 held-back tokens at sparsity 0.50"), std::string::npos)
      << r.err;
  EXPECT_EQ(f.get_float_array("squeeze.sparsity.refined_levels"), (std::vector<float>{0.4f, 0.5f}));
  EXPECT_EQ(f.get_float_array("squeeze.sparsity.heldout_density").size(), 8u);
  const gguf::File src = gguf::File::open(model_);
  ASSERT_EQ(f.tensors().size(), src.tensors().size());  // weights copied unchanged
  for (size_t i = 0; i < src.tensors().size(); ++i) {
    ASSERT_EQ(f.tensors()[i].n_bytes, src.tensors()[i].n_bytes);
    ASSERT_EQ(0, std::memcmp(f.tensors()[i].data, src.tensors()[i].data, src.tensors()[i].n_bytes));
  }

  const auto run = run_squeeze("run -m " + o + " -c 64 -t 2 -p hello -n 8 --temp 0 --act-sparsity 0.5",
                               "sp_run");
  ASSERT_EQ(run.rc, 0) << run.err;
  EXPECT_NE(run.err.find("act-sparsity: teal at level 0.50"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("act-sparsity density: attn_in"), std::string::npos) << run.err;
  const auto bench = run_squeeze("bench -m " + o + " -t 2 -p 8 -n 4 -r 1 --act-sparsity 0.3",
                                 "sp_bench");
  ASSERT_EQ(bench.rc, 0) << bench.err;
  EXPECT_NE(bench.err.find("act-sparsity density over all tests"), std::string::npos) << bench.err;
  // The head's thresholds come with TEAL's; --head-sparsity applies them.
  EXPECT_EQ(t->head.size(), 100u);
  EXPECT_EQ(f.get_float_array("squeeze.sparsity.heldout_head_density").size(), 2u);
  EXPECT_NE(r.err.find("head_in"), std::string::npos) << r.err;
  const auto hr = run_squeeze("run -m " + o + " -c 64 -t 2 -p hello -n 8 --temp 0 --act-sparsity 0.5 "
                              "--head-sparsity 0.4", "sp_head_run");
  ASSERT_EQ(hr.rc, 0) << hr.err;
  EXPECT_NE(hr.err.find("act-sparsity: teal at level 0.50, head at level 0.40"), std::string::npos)
      << hr.err;
  EXPECT_NE(hr.err.find("; head_in "), std::string::npos) << hr.err;
  expect_clean_error(run_squeeze("run -m " + o + " -c 64 -p hi -n 2 --head-sparsity 0.5", "sp_head_b1"),
                     "--head-sparsity needs --act-sparsity");
  expect_clean_error(run_squeeze("bench -m " + o + " -p 0 -n 2 --act-sparsity 0.5 --head-sparsity 0.555",
                                 "sp_head_b2"), "no level");

  EXPECT_EQ(f.require_string("squeeze.sparsity.allocation"), "uniform");

  // Greedy allocation: the metadata says so, the shares are printed, and the file runs.
  const std::string og = out("greedy.gguf");
  const auto g = run_squeeze(base() + "-o " + og + " --sparsity 0.5 --allocate greedy", "sp_greedy");
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_NE(g.err.find("greedy allocation at 0.50 (sparsity, mean over layers): attn_in "),
            std::string::npos) << g.err;
  EXPECT_EQ(gguf::File::open(og).require_string("squeeze.sparsity.allocation"), "greedy");
  const auto gr = run_squeeze("run -m " + og + " -c 64 -t 2 -p hello -n 4 --temp 0 --act-sparsity 0.5",
                              "sp_greedy_run");
  ASSERT_EQ(gr.rc, 0) << gr.err;

  // CATS replaces the table of a file that had one.
  const std::string o2 = out("cats.gguf");
  const auto c = run_squeeze("sparsify -m " + o + " -t 2 --calib " + calib_ + " --calib-samples 4 --calib-ctx 32 --heldout-samples 2 -o " + o2 + " --method cats", "sp_cats");
  ASSERT_EQ(c.rc, 0) << c.err;
  const auto t2 = sparsity::ThresholdTable::read(gguf::File::open(o2));
  ASSERT_TRUE(t2.has_value());
  EXPECT_EQ(t2->method, sparsity::Method::Cats);
  EXPECT_EQ(t2->thresholds.size(), 100u * 2);
  EXPECT_TRUE(t2->head.empty());
  expect_clean_error(run_squeeze("run -m " + o2 + " -c 64 -p hi -n 2 --act-sparsity 0.5 --head-sparsity 0.5",
                                 "sp_head_b3"), "no head thresholds");

  // ReLU-fication: no thresholds, one level 0.
  const std::string o3 = out("relu.gguf");
  const auto rl = run_squeeze(base() + "-o " + o3 + " --method relu", "sp_relu");
  ASSERT_EQ(rl.rc, 0) << rl.err;
  EXPECT_NE(rl.err.find("at sparsity 0.00"), std::string::npos) << rl.err;
  const auto t3 = sparsity::ThresholdTable::read(gguf::File::open(o3));
  ASSERT_TRUE(t3.has_value());
  EXPECT_EQ(t3->method, sparsity::Method::Relu);
  EXPECT_EQ(t3->levels, std::vector<float>{0.0f});
  const auto rr = run_squeeze("run -m " + o3 + " -c 64 -t 2 -p hello -n 4 --temp 0 --act-sparsity 0",
                              "sp_relu_run");
  ASSERT_EQ(rr.rc, 0) << rr.err;
  EXPECT_NE(rr.err.find("act-sparsity: relu at level 0.00"), std::string::npos) << rr.err;
  expect_clean_error(run_squeeze("run -m " + o3 + " -c 64 -p hi -n 2 --act-sparsity 0.5", "sp_relu_bad"),
                     "no level");
}

TEST_F(SparsifyCli, BadOptionsAreCleanErrorsAndLeaveNothing) {
  const size_t before = n_files();
  const std::string o = out("x.gguf");
  expect_clean_error(run_squeeze(base() + "-o " + o + " --method relu6", "sp_b1"), "relu6");
  expect_clean_error(run_squeeze(base() + "-o " + o + " --method relu --sparsity 0.5", "sp_b1b"),
                     "relu has no thresholds");
  expect_clean_error(run_squeeze(base() + "-o " + o + " --sparsity 0.555", "sp_b2"), "0.01");
  expect_clean_error(run_squeeze(base() + "-o " + o + " --sparsity 1.5", "sp_b3"), "0.99");
  expect_clean_error(run_squeeze(base() + "-o " + o + " --sparsity 0.5,0.5", "sp_b3b"), "twice");
  expect_clean_error(run_squeeze(base() + "-o " + o + " --refine-passes -1", "sp_b3c"), "refine");
  expect_clean_error(run_squeeze(base() + "-o " + o + " --allocate best", "sp_b4"), "best");
  expect_clean_error(run_squeeze(base() + "-o " + o + " --method cats --allocate greedy", "sp_b4b"),
                     "greedy");
  expect_clean_error(run_squeeze(base() + "-o " + o + " --allocate greedy --greedy-step 0", "sp_b4c"),
                     "--greedy-step");
  expect_clean_error(run_squeeze(base() + "-o " + o + " --allocate greedy --greedy-samples 0",
                                 "sp_b4d"), "--greedy-samples");
  expect_clean_error(run_squeeze(base() + "-o " + o + " --greedy-step 0.1", "sp_b4e"),
                     "need --allocate greedy");
  expect_clean_error(run_squeeze(bare() + "--calib " + calib_ + " -o " + o + " --calib-samples 0", "sp_b5"), "positive");
  expect_clean_error(run_squeeze(bare() + "-o " + o + " --calib " + out("none.txt"), "sp_b6"),
                     "none.txt");
  expect_clean_error(run_squeeze(base() + "-o " + model_, "sp_b7"), "");  // output = input
  EXPECT_EQ(n_files(), before);
  // A file without thresholds, and a level the table lacks.
  expect_clean_error(run_squeeze("run -m " + model_ + " -c 64 -p hi -n 2 --act-sparsity 0.5", "sp_b8"),
                     "squeeze sparsify");
  expect_clean_error(run_squeeze("perplexity -m " + model_ + " -f " + calib_ + " -c 32 --act-sparsity 0.5", "sp_b9"),
                     "no activation-sparsity thresholds");
  expect_clean_error(run_squeeze("bench -m " + model_ + " -p 8 -n 0 --act-sparsity 2", "sp_b10"),
                     "act-sparsity");
}

}  // namespace
}  // namespace squeeze
