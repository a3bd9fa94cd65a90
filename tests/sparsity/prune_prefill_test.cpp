// POP's layer calibration (compress/prefill_calib.h) on the tiny model, and `squeeze
// prune-prefill` / `--prefill-skip` through the binary: the orders are permutations, the kld
// score finds that skipping the last layer in prefill costs nothing, the written file runs with
// auto:R, and bad options are one clear error with no file left behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "cli_run.h"
#include "compress/prefill_calib.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tiny_model.h"

namespace squeeze {
namespace {

namespace fs = std::filesystem;
using testing::expect_clean_error;
using testing::run_squeeze;

class PrunePrefill : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("squeeze_pop_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "tiny.gguf").string();
    testing::TinyModelSpec spec;
    spec.n_layer = 4;
    testing::write_tiny_model(model_, spec);
    calib_ = (dir_ / "calib.txt").string();
    std::ofstream c(calib_);
    for (int i = 0; i < 100; ++i) c << "The quick brown fox " << i << " jumps over the lazy dog.\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string out(const std::string& name) const { return (dir_ / name).string(); }
  size_t n_files() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }

  fs::path dir_;
  std::string model_, calib_;
};

std::vector<int32_t> some_tokens(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 11) % 250);
  return t;
}

bool is_permutation_of_layers(const std::vector<int32_t>& order, int64_t n) {
  std::vector<int32_t> sorted = order, want(static_cast<size_t>(n));
  std::sort(sorted.begin(), sorted.end());
  std::iota(want.begin(), want.end(), 0);
  return sorted == want;
}

TEST_F(PrunePrefill, ScoresAndOrders) {
  const auto m = model::Model::load(model_);
  ThreadPool pool(2);
  const auto tokens = some_tokens(128);
  compress::PrefillCalibOptions o;
  o.n_chunks = 2;
  o.ctx = 32;
  o.candidates = 2;
  o.max_fraction = 0.5;
  o.score = "kld";
  const auto kld = compress::calibrate_prefill(*m, tokens, o, pool);
  ASSERT_TRUE(is_permutation_of_layers(kld.plan.order, 4));
  // The last layer's output for prompt tokens feeds only their own logits: free to skip.
  EXPECT_EQ(kld.plan.scores[3], 0.0f);
  for (int il = 0; il < 3; ++il) EXPECT_GT(kld.plan.scores[il], 0.0f) << il;
  EXPECT_EQ(kld.plan.order[0], 3);
  ASSERT_EQ(kld.greedy_kld.size(), 2u);
  EXPECT_EQ(kld.greedy_kld[0], 0.0);
  EXPECT_EQ(kld.evaluations, 4 + 2 * 2);

  // The measure itself: nothing skipped, or only the last layer, costs nothing.
  compress::PrefillKld measure(*m, tokens, 2, 32, pool);
  EXPECT_EQ(measure.kld({}), 0.0);
  EXPECT_EQ(measure.kld({0, 0, 0, 1}), 0.0);
  EXPECT_GT(measure.kld({0, 1, 0, 0}), 0.0);

  o.score = "bi";
  const auto bi = compress::calibrate_prefill(*m, tokens, o, pool);
  EXPECT_TRUE(is_permutation_of_layers(bi.plan.order, 4));
  for (const float s : bi.plan.scores) EXPECT_TRUE(s > 0.0f && s < 2.0f) << s;
  o.score = "last";
  EXPECT_EQ(compress::calibrate_prefill(*m, {}, o, pool).plan.order, (std::vector<int32_t>{3, 2, 1, 0}));
  o.score = "nope";
  EXPECT_THROW(compress::calibrate_prefill(*m, tokens, o, pool), UsageError);
  o.score = "kld";
  o.n_chunks = 8;  // more tokens than the text has
  EXPECT_THROW(compress::calibrate_prefill(*m, tokens, o, pool), UsageError);
}

TEST_F(PrunePrefill, WritesThePlanAndRunsWithIt) {
  const std::string o = out("pop.gguf");
  const auto r = run_squeeze("prune-prefill -m " + model_ + " -o " + o + " -t 2 --calib " +
                             calib_ + " --calib-chunks 2 --calib-ctx 32 --candidates 2", "pop_kld");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("layer order (skipped first): 3 "), std::string::npos) << r.out;
  const gguf::File f = gguf::File::open(o);
  EXPECT_EQ(f.get_string("squeeze.pop.score").value_or(""), "kld");
  EXPECT_EQ(f.get_string("squeeze.pop.calib.file").value_or(""), "calib.txt");
  EXPECT_EQ(f.tensors().size(), gguf::File::open(model_).tensors().size());

  const auto run = run_squeeze("run -m " + o + " -c 64 -t 1 -n 4 --temp 0 -p hello --prefill-skip auto:0.5",
                               "pop_run");
  ASSERT_EQ(run.rc, 0) << run.err;
  EXPECT_NE(run.err.find("prefill-skip: layers "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("(2 of 4)"), std::string::npos) << run.err;
  const auto chat = run_squeeze("chat -m " + o + " -c 64 -t 1 -n 2 --temp 0 --prefill-skip auto:0.25",
                                "pop_chat", "hello\nthe\n/quit\n");
  ASSERT_EQ(chat.rc, 0) << chat.err;
  EXPECT_NE(chat.err.find("prefill-skip: layers 3 (1 of 4)"), std::string::npos) << chat.err;
  const auto bench = run_squeeze("bench -m " + o + " -t 1 -p 16 -n 0 -r 1 --prefill-skip 1-2",
                                 "pop_bench");
  ASSERT_EQ(bench.rc, 0) << bench.err;
  EXPECT_NE(bench.err.find("prefill-skip: layers 1-2 (2 of 4)"), std::string::npos) << bench.err;
}

TEST_F(PrunePrefill, BadOptionsAreCleanErrors) {
  const size_t files = n_files();
  expect_clean_error(run_squeeze("run -m " + model_ + " -c 64 -p hi -n 1 --prefill-skip 4", "pop_e1"),
                     "is not a range of layers 0..3");
  expect_clean_error(run_squeeze("run -m " + model_ + " -c 64 -p hi -n 1 --prefill-skip auto:0.5",
                                 "pop_e2"), "prune-prefill");
  expect_clean_error(run_squeeze("perplexity -m " + model_ + " -f " + calib_ +
                                 " --ctx 32 --prefill-skip 1", "pop_e3"), "--prefill-split");
  expect_clean_error(run_squeeze("perplexity -m " + model_ + " -f " + calib_ +
                                 " --ctx 32 --prefill-split", "pop_e4"), "--prefill-skip");
  expect_clean_error(run_squeeze("prune-prefill -m " + model_ + " -o " + out("x.gguf") +
                                 " --score shortgpt", "pop_e5"), "unknown --score");
  expect_clean_error(run_squeeze("prune-prefill -m " + model_ + " -o " + out("y.gguf") +
                                 " --calib " + calib_ + " --calib-chunks 1000 --calib-ctx 32",
                                 "pop_e6"), "need");
  EXPECT_EQ(n_files(), files);
}

// squeeze heads: the table, a PNG, and a stored ranking that --head-score static runs with.
TEST_F(PrunePrefill, HeadsScoresDrawsAndStores) {
  const std::string png = out("heads.png"), o = out("heads.gguf");
  const auto r = run_squeeze("heads -m " + model_ + " -f " + calib_ + " -t 2 --ctx 32 --chunks 2 "
                             "--head-chunk 8 --png " + png + " -o " + o + " --store entropy", "pop_heads");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* kind : {"qk (", "entropy (", "vnorm (", "a2sf ("}) {
    EXPECT_NE(r.out.find(kind), std::string::npos) << kind << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("layer  3:"), std::string::npos) << r.out;
  std::ifstream in(png, std::ios::binary);
  char sig[8] = {};
  in.read(sig, 8);
  EXPECT_EQ(std::string(sig + 1, 3), "PNG");
  const gguf::File f = gguf::File::open(o);
  EXPECT_EQ(f.get_string("squeeze.heads.score").value_or(""), "entropy");
  const auto scores = f.get_float_array("squeeze.heads.scores");
  ASSERT_EQ(scores.size(), 4u * 4u);  // 4 layers x 4 heads
  for (const float x : scores) EXPECT_TRUE(x >= 0.0f && x <= 1.0f) << x;  // 1 - H / ln n

  const auto run = run_squeeze("run -m " + o + " -c 64 -t 1 -n 2 --temp 0 -p hello "
                               "--prefill-heads 0.5 --head-score static", "pop_static");
  ASSERT_EQ(run.rc, 0) << run.err;
  EXPECT_NE(run.err.find("by the stored entropy ranking"), std::string::npos) << run.err;
  expect_clean_error(run_squeeze("run -m " + model_ + " -c 64 -p hi -n 1 --prefill-heads 0.5 "
                                 "--head-score static", "pop_static_e"), "squeeze heads -o");
  expect_clean_error(run_squeeze("run -m " + model_ + " -c 64 -p hi -n 1 --prefill-heads 0.5 "
                                 "--head-score cosine", "pop_score_e"), "unknown head score");
  expect_clean_error(run_squeeze("run -m " + model_ + " -c 64 -p hi -n 1 --head-groups",
                                 "pop_groups_e"), "--head-groups needs --prefill-heads");
  // Head-pruning options without head pruning are refused, not ignored.
  expect_clean_error(run_squeeze("run -m " + model_ + " -c 64 -p hi -n 1 --head-chunk 64",
                                 "pop_chunk_e"), "--head-chunk requires --prefill-heads");
  expect_clean_error(run_squeeze("bench -m " + model_ + " -p 8 -n 0 --head-score qk",
                                 "pop_hscore_e"), "--head-score requires --prefill-heads");
  expect_clean_error(run_squeeze("heads -m " + model_ + " -f " + calib_ + " --store x", "pop_store_e"),
                     "unknown head score");
  expect_clean_error(run_squeeze("heads -m " + model_ + " -f " + calib_ + " --ctx 32 --chunks 999",
                                 "pop_heads_e"), "need");
}

// perplexity --prefill-split: skipping only the last layer leaves the scored rows unchanged;
// skipping a middle one changes them.
TEST_F(PrunePrefill, PerplexitySplitProtocol) {
  auto ppl = [&](const std::string& extra, const std::string& tag) {
    const auto r = run_squeeze("perplexity -m " + model_ + " -f " + calib_ + " -t 2 --ctx 32 "
                               "--chunks 4 " + extra, tag);
    EXPECT_EQ(r.rc, 0) << r.err;
    const size_t at = r.out.find("PPL = ");
    return at == std::string::npos ? std::string() : r.out.substr(at, r.out.find('\n', at) - at);
  };
  const std::string dense = ppl("", "pop_p0");
  ASSERT_FALSE(dense.empty());
  EXPECT_EQ(ppl("--prefill-skip 3 --prefill-split", "pop_p1"), dense);
  EXPECT_NE(ppl("--prefill-skip 1 --prefill-split", "pop_p2"), dense);
}

}  // namespace
}  // namespace squeeze
