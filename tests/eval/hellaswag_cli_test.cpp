// `squeeze hellaswag` end to end on the tiny model: llama-perplexity's per-task lines, the final
// accuracy, --per-task, --task-order, --tasks, and bad input (missing or malformed file,
// --tasks 0, unknown order or flag, a task longer than --ctx, unwritable --per-task, a file
// without sparsity thresholds) each as one `error:` line with a non-zero exit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_run.h"
#include "temp_dir.h"
#include "tiny_model.h"

namespace squeeze {
namespace {

namespace fs = std::filesystem;
using Result = testing::CmdResult;

Result hellaswag(const std::string& args) {
  return testing::run_squeeze("hellaswag " + args, "hellaswag_cli");
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string p = testing::temp_path(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::string tasks_text(int n) {
  const char* words[] = {"the", "hello", "world", "or", "tell", "a", "small", "model"};
  std::string s;
  for (int i = 0; i < n; ++i) {
    s += std::string("Topic: ") + words[i % 8] + " " + words[(i + 3) % 8] + "\n";
    s += std::to_string(i % 4) + "\n";
    for (int j = 0; j < 4; ++j) s += std::string(words[(i + j) % 8]) + " " + words[j] + ".\n";
  }
  return s;
}

struct Files {
  std::string model = [] {
    testing::TinyModelSpec spec;
    spec.tied_output = false;
    const std::string p = testing::temp_path("hellaswag_cli_tiny.gguf");
    testing::write_tiny_model(p, spec);
    return p;
  }();
  std::string tasks = write_file("hellaswag_cli_tasks.txt", tasks_text(6));
};

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Prefill pruning reaches hellaswag's contexts (docs/POP.md): the run says so and completes.
TEST(HellaswagCli, RunsWithPrefillPruning) {
  Files f;
  const Result r = hellaswag("-m " + f.model + " -f " + f.tasks + " --tasks 4 -t 2 "
                             "--prefill-skip 0 --prefill-heads 0.5 --head-chunk 4");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("prefill-skip: layers 0 (1 of 2)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("prefill-heads: 0.50 of the heads per 4 prompt positions by vnorm"),
            std::string::npos) << r.err;
  EXPECT_NE(r.out.find("Final result: "), std::string::npos) << r.out;
}

TEST(HellaswagCli, PrintsLlamaLinesAndPerTaskTable) {
  Files f;
  const std::string tsv = testing::temp_path("per_task.tsv");
  const Result r = hellaswag("-m " + f.model + " -f " + f.tasks +
                             " --tasks 4 --task-order file -t 2 --per-task " + tsv);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("task\tacc_norm\t95% confidence interval"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n4\t"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\n5\t"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Final result: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(4 tasks, "), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("[4/4]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in file order"), std::string::npos) << r.err;
  const auto rows = lines_of(testing::slurp(tsv));
  ASSERT_EQ(rows.size(), 5u);  // header + 4 tasks
  EXPECT_EQ(rows[0].rfind("# order\ttask\tgold\tchosen", 0), 0u);
  for (int i = 1; i <= 4; ++i) {
    // file order: task i-1, gold (i-1) % 4
    EXPECT_EQ(rows[i].rfind(std::to_string(i) + "\t" + std::to_string(i - 1) + "\t" +
                                std::to_string((i - 1) % 4) + "\t", 0), 0u) << rows[i];
  }
  for (const auto& e : fs::directory_iterator(fs::path(tsv).parent_path())) {  // no temporary left
    EXPECT_EQ(e.path().filename().string().rfind(fs::path(tsv).filename().string() + ".tmp", 0),
              std::string::npos);
  }
}

TEST(HellaswagCli, RandomOrderIsLlamasAndTasksAreCapped) {
  Files f;
  const std::string tsv = testing::temp_path("per_task_random.tsv");
  const Result r = hellaswag("-m " + f.model + " -f " + f.tasks + " --tasks 100 --per-task " + tsv);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("running all of them"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("(6 tasks, "), std::string::npos) << r.out;
  const auto rows = lines_of(testing::slurp(tsv));
  ASSERT_EQ(rows.size(), 7u);
  // llama-perplexity's draw over 6 tasks (mt19937 seed 1): the first is task 2.
  EXPECT_EQ(rows[1].rfind("1\t2\t2\t", 0), 0u) << rows[1];
}

// --act-sparsity as in `perplexity`: the file's thresholds zero activations, the scores change,
// and the density reached is reported.
TEST(HellaswagCli, ActSparsityChangesTheScores) {
  Files f;
  const std::string calib = write_file("calib.txt", [] {
    std::string c;
    for (int i = 0; i < 400; ++i) c += "The quick brown fox " + std::to_string(i) + " jumps.\n";
    return c;
  }());
  const std::string sparse = testing::temp_path("hellaswag_teal.gguf");
  const Result sp = testing::run_squeeze("sparsify -m " + f.model + " -o " + sparse +
                                         " -t 2 --calib " + calib + " --calib-samples 4 "
                                         "--calib-ctx 32 --heldout-samples 2 --method teal "
                                         "--sparsity 0.5", "hellaswag_sparsify");
  ASSERT_EQ(sp.rc, 0) << sp.err;
  const std::string dense_tsv = testing::temp_path("dense.tsv"),
                    sparse_tsv = testing::temp_path("sparse.tsv");
  const std::string args = " -f " + f.tasks + " --tasks 6 -t 2 --per-task ";
  const Result dense = hellaswag("-m " + sparse + args + dense_tsv);
  const Result teal = hellaswag("-m " + sparse + args + sparse_tsv + " --act-sparsity 0.5");
  ASSERT_EQ(dense.rc, 0) << dense.err;
  ASSERT_EQ(teal.rc, 0) << teal.err;
  EXPECT_EQ(dense.out.find("act-sparsity"), std::string::npos);
  EXPECT_NE(teal.err.find("act-sparsity: teal at level 0.50"), std::string::npos) << teal.err;
  EXPECT_NE(teal.out.find("act-sparsity teal 0.50: density attn_in"), std::string::npos)
      << teal.out;
  EXPECT_NE(testing::slurp(dense_tsv), testing::slurp(sparse_tsv));
}

TEST(HellaswagCli, BadInputIsOneErrorLine) {
  Files f;
  const std::string m = "-m " + f.model + " ";
  const std::string all = m + "--tasks 6 ";  // the file's count: no "running all" note
  testing::expect_clean_error(hellaswag(m + "-f /nonexistent/hs.txt"), "cannot open HellaSwag");
  const std::string seven = write_file("seven.txt", tasks_text(1) + "extra\n");
  testing::expect_clean_error(hellaswag(m + "-f " + seven), "not a multiple of 6");
  std::string bad_gold = tasks_text(2);
  bad_gold.replace(bad_gold.find("\n1\n"), 3, "\n7\n");
  testing::expect_clean_error(hellaswag(m + "-f " + write_file("gold.txt", bad_gold)),
                              "not 0, 1, 2 or 3");
  testing::expect_clean_error(hellaswag(m + "-f " + write_file("empty.txt", "")), "no task");
  testing::expect_clean_error(hellaswag(m + "-f " + f.tasks + " --tasks 0"), "--tasks");
  testing::expect_clean_error(hellaswag(m + "-f " + f.tasks + " --task-order shuffled"),
                              "--task-order");
  testing::expect_clean_error(hellaswag(m + "-f " + f.tasks + " --no-such-flag"), "no-such-flag");
  testing::expect_clean_error(hellaswag(all + "-f " + f.tasks + " --ctx 8"), "--ctx is 8");
  testing::expect_clean_error(
      hellaswag(all + "-f " + f.tasks + " --per-task /nonexistent/dir/x.tsv"), "cannot write");
  testing::expect_clean_error(hellaswag(all + "-f " + f.tasks + " --act-sparsity 0.5"),
                              "sparsity");
  testing::expect_clean_error(hellaswag("-m /nonexistent/model.gguf --tasks 6 -f " + f.tasks),
                              "/nonexistent/model.gguf");
}

}  // namespace
}  // namespace squeeze
