// `squeeze quantize` through the binary: progress and a loadable file on good input, one clear
// `error:` line on bad input, and an interrupt (SIGINT) half-way leaves no file behind.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gguf/gguf.h"
#include "require_file.h"
#include "tiny_model.h"

namespace squeeze {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Starts `squeeze ARGS...` with stdout and stderr going to files; returns the child's pid.
pid_t spawn(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fo = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int fe = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fo, 1);
    ::dup2(fe, 2);
    std::vector<char*> argv{const_cast<char*>(SQUEEZE_BINARY)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(SQUEEZE_BINARY, argv.data());
    ::_exit(127);
  }
  return pid;
}

// Exit code, or 128 + signal number when killed by a signal.
int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class QuantizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("squeeze_quantize_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "work");
    model_ = (dir_ / "work" / "tiny.gguf").string();
    testing::write_tiny_model(model_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct Result {
    int rc;
    std::string out, err;
  };
  Result run(const std::vector<std::string>& args) {
    const pid_t pid = spawn(args, dir_ / "stdout.txt", dir_ / "stderr.txt");
    const int rc = wait_for(pid);
    return {rc, slurp(dir_ / "stdout.txt"), slurp(dir_ / "stderr.txt")};
  }
  // Exit code 1 or 2 and exactly one line, "error: ...", naming `needle`.
  void expect_clean_error(const std::vector<std::string>& args, const std::string& needle) {
    const Result r = run(args);
    EXPECT_TRUE(r.rc == 1 || r.rc == 2) << "rc=" << r.rc << " stderr: " << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
  }
  std::vector<std::string> work_files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_ / "work")) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  void expect_calibration_stops(const std::string& command, const std::vector<std::string>& args);

  fs::path dir_;
  std::string model_;
};

TEST_F(QuantizeCli, ConvertsWithProgress) {
  const std::string out = (dir_ / "work" / "tiny.q4_0.gguf").string();
  const Result r = run({"quantize", "-m", model_, "-o", out, "--type", "q4_0", "--threads", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("[   1/  20] token_embd.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("q8_0 -> q4_0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("copy f32"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("quantize: 20 tensors (15 converted, 5 copied"), std::string::npos) << r.err;
  EXPECT_EQ(gguf::File::open(out).require_int("general.file_type"), 2);
  EXPECT_EQ(work_files(), (std::vector<std::string>{"tiny.gguf", "tiny.q4_0.gguf"}));
}

TEST_F(QuantizeCli, BadArgumentsGiveOneClearError) {
  const std::string out = (dir_ / "work" / "o.gguf").string();
  expect_clean_error({"quantize", "-m", model_, "-o", out, "--type", "q9_0"}, "unknown type 'q9_0'");
  expect_clean_error({"quantize", "-m", model_, "-o", out, "--type", "q4_K"}, "types: f32");
  expect_clean_error({"quantize", "-m", model_, "-o", out}, "--type");
  expect_clean_error({"quantize", "-m", model_, "--type", "q8_0"}, "--output");
  expect_clean_error({"quantize", "-m", (dir_ / "missing.gguf").string(), "-o", out, "--type", "q8_0"},
                     "missing.gguf");
  expect_clean_error({"quantize", "-m", model_, "-o", "/nonexistent/dir/o.gguf", "--type", "q8_0"},
                     "/nonexistent/dir");
  expect_clean_error({"quantize", "-m", model_, "-o", model_, "--type", "q8_0"}, "is the input file");
  expect_clean_error({"quantize", "-m", model_, "-o", out, "--type", "q8_0", "--threads", "-3"},
                     "threads");
  EXPECT_EQ(work_files(), std::vector<std::string>{"tiny.gguf"});
}

// Needs an input big enough to take a while: the real model to f32 (~540 MB written).
TEST_F(QuantizeCli, InterruptLeavesNothingBehind) {
  const fs::path real = squeeze::testing::default_model();
  SQUEEZE_REQUIRE_FILE(real.string());
  const fs::path err = dir_ / "stderr.txt";
  const pid_t pid = spawn({"quantize", "-m", real.string(), "-o", (dir_ / "work" / "big.f32.gguf").string(),
                           "--type", "f32", "--threads", "2"},
                          dir_ / "stdout.txt", err);
  // Wait for the first progress line (the handler is installed by then), then ~100 ms more.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp(err).find("[   1/") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(pid, SIGINT);
  const int rc = wait_for(pid);
  const std::string text = slurp(err);
  EXPECT_EQ(rc, 130) << text;
  EXPECT_NE(text.find("error: interrupted; no output written"), std::string::npos) << text;
  EXPECT_EQ(work_files(), std::vector<std::string>{"tiny.gguf"});
}

// Calibrated methods stop between calibration samples: an interrupt during the Hessian pass
// of the first block ends the run promptly, with no file. `args` follow the command name.
void QuantizeCli::expect_calibration_stops(const std::string& command,
                                           const std::vector<std::string>& args) {
  const fs::path real = squeeze::testing::default_model();
  SQUEEZE_REQUIRE_FILE(real.string());
  const fs::path calib = dir_ / "calib.txt";
  {
    std::ofstream c(calib);
    for (int i = 0; i < 2000; ++i) c << "The quick brown fox " << i << " jumps over the lazy dog. ";
  }
  const fs::path err = dir_ / "stderr.txt";
  std::vector<std::string> argv = {command, "-m", real.string(), "-o",
                                   (dir_ / "work" / "g.gguf").string(), "--calib", calib.string(),
                                   "--calib-samples", "64", "--threads", "2"};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = spawn(argv, dir_ / "stdout.txt", err);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp(err).find("calibration:") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGINT);
  const int rc = wait_for(pid);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string text = slurp(err);
  EXPECT_EQ(rc, 130) << text;
  // "Promptly": one calibration step, not the whole run (minutes). AddressSanitizer slows a
  // step several-fold (10.7 s seen in CI with two tests running), so its builds get more room.
#if defined(__SANITIZE_ADDRESS__)
  constexpr double kStopSeconds = 40.0;
#else
  constexpr double kStopSeconds = 10.0;
#endif
  EXPECT_LT(waited, kStopSeconds) << "took " << waited << " s to stop";
  EXPECT_NE(text.find("error: interrupted; no output written"), std::string::npos) << text;
  EXPECT_EQ(work_files(), std::vector<std::string>{"tiny.gguf"});
}

TEST_F(QuantizeCli, GptqInterruptLeavesNothingBehind) {
  expect_calibration_stops("quantize", {"--method", "gptq", "--bits", "3", "--group-size", "64"});
}

TEST_F(QuantizeCli, PruneInterruptLeavesNothingBehind) {
  expect_calibration_stops("prune", {"--method", "sparsegpt", "--sparsity", "0.5"});
}

}  // namespace
}  // namespace squeeze
