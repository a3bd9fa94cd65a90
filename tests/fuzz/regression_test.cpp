// Replays every input kept under tests/data/fuzz/<harness>/ (crashes the fuzzers once found,
// and the seeds worth keeping) through the harnesses' entry points (targets.h): each must be
// accepted or refused with squeeze::Error, never crash, leak a file descriptor or grow the
// process past the fuzzers' memory limit. Under ASan + UBSan (the CI's second
// pass) an out-of-bounds read or an overflow fails the test as well.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "require_file.h"
#include "targets.h"

namespace squeeze::fuzz {
namespace {

namespace fs = std::filesystem;

// The files of tests/data/fuzz/<harness>/, sorted.
std::vector<fs::path> inputs(const std::string& harness) {
  std::vector<fs::path> out;
  const fs::path dir = fs::path(testing::data_file("fuzz")) / harness;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The fuzzers' -rss_limit_mb: an input that makes the process this large is a bug as well.
constexpr long kRssLimitMb = 2048;

long peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

// Open file descriptors of this process (a parser that throws must not leak its file).
size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

template <typename F>
void replay(const std::string& harness, F&& entry) {
  const std::vector<fs::path> files = inputs(harness);
  ASSERT_FALSE(files.empty()) << "no inputs under tests/data/fuzz/" << harness;
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.string());
    const std::vector<uint8_t> bytes = read_bytes(p);
    const size_t fds = open_fds();
    EXPECT_NO_THROW(entry(Bytes(bytes)));
    EXPECT_EQ(open_fds(), fds) << "file descriptors leaked";
    EXPECT_LT(peak_rss_mb(), kRssLimitMb) << "peak memory after this input";
  }
}

TEST(FuzzRegression, Gguf) { replay("gguf", [](Bytes b) { gguf_input(b); }); }

TEST(FuzzRegression, ChatTemplate) {
  replay("chat_template", [](Bytes b) { chat_template_input(b); });
}

TEST(FuzzRegression, Logits) {
  const std::string temp = (fs::temp_directory_path() /
                            ("squeeze_fuzz_regression." + std::to_string(getpid()))).string();
  replay("logits", [&](Bytes b) { logits_input(b, temp); });
  fs::remove(temp);
}

TEST(FuzzRegression, Sparsity) {
  const std::unique_ptr<model::Model> m = tiny_model();
  replay("sparsity", [&](Bytes b) { sparsity_input(*m, b); });
}

TEST(FuzzRegression, OpenAi) { replay("openai", [](Bytes b) { openai_request_input(b); }); }

TEST(FuzzRegression, Tokenizer) {
  SQUEEZE_REQUIRE_FILE(testing::default_model());
  const tokenizer::Tokenizer tok = load_tokenizer(testing::default_model());
  replay("tokenizer", [&](Bytes b) { tokenizer_input(tok, b); });
}

}  // namespace
}  // namespace squeeze::fuzz
