// `squeeze perplexity` end to end on the tiny model: output, the self-KLD run, and bad input
// (missing files, short text, ctx too large, saved logits of another text / vocab / ctx, a
// corrupt or truncated logits file) each as one `error:` line with a non-zero exit.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "cli_run.h"
#include "temp_dir.h"
#include "tiny_model.h"

namespace squeeze {
namespace {

namespace fs = std::filesystem;

using Result = testing::CmdResult;
using testing::slurp;

fs::path tmp(const std::string& name) { return testing::temp_path(name); }

Result perplexity(const std::string& args) {
  return testing::run_squeeze("perplexity " + args, "ppl_cli");
}

// Progress lines may come before the error line.
void expect_error(const Result& r, const std::string& needle) {
  testing::expect_clean_error(r, needle, /*after_progress=*/true);
}

// ~1 token per byte with the tiny byte-level vocabulary.
std::string text_file(const std::string& name, size_t n_bytes, unsigned seed) {
  const char* words[] = {"the", "hello", "world", "or", "tell",
                         "a",   "small", "model", "of", "text"};
  std::string s;
  unsigned x = seed;
  while (s.size() < n_bytes) {
    x = x * 1103515245u + 12345u;
    s += words[(x >> 16) % 10];
    s += (x >> 8) % 7 == 0 ? ".\n" : " ";
  }
  const fs::path p = tmp(name);
  std::ofstream(p, std::ios::binary) << s;
  return p.string();
}

std::string model_file(const std::string& name, uint64_t seed = 1,
                       const std::vector<std::string>& vocab = {}) {
  testing::TinyModelSpec spec;
  spec.seed = seed;
  spec.tied_output = false;  // tied random embeddings make every model predict its input
  if (!vocab.empty()) {
    spec.skip_keys = {"tokenizer.ggml.tokens"};
    spec.extra = [vocab](gguf::Writer& w) { w.add_string_array("tokenizer.ggml.tokens", vocab); };
  }
  const fs::path p = tmp(name);
  testing::write_tiny_model(p.string(), spec);
  return p.string();
}

struct Files {
  std::string model = model_file("squeeze_ppl_tiny.gguf");
  std::string text = text_file("squeeze_ppl_text.txt", 700, 1);
};

TEST(PerplexityCli, PrintsProgressAndPpl) {
  Files f;
  const Result r = perplexity("-m " + f.model + " -f " + f.text + " --ctx 64 -t 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("PPL = "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("+/- "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wall time"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("[1/"), std::string::npos) << r.err;
  const Result two = perplexity("-m " + f.model + " -f " + f.text + " --ctx 64 --chunks 2 -b 16");
  ASSERT_EQ(two.rc, 0) << two.err;
  EXPECT_NE(two.err.find("[2/2]"), std::string::npos) << two.err;
}

TEST(PerplexityCli, SelfKldIsZeroAndTop1Is100) {
  Files f;
  const std::string logits = tmp("squeeze_ppl_self.logits").string();
  fs::remove(logits);
  const std::string run = "-m " + f.model + " -f " + f.text + " --ctx 64";
  const Result s = perplexity(run + " --save-logits " + logits);
  ASSERT_EQ(s.rc, 0) << s.err;
  ASSERT_TRUE(fs::exists(logits));
  const Result k = perplexity(run + " --kl-divergence " + logits);
  ASSERT_EQ(k.rc, 0) << k.err;
  EXPECT_NE(k.out.find("Mean KLD             0.000000 +/- 0.000000"), std::string::npos) << k.out;
  EXPECT_NE(k.out.find("Maximum KLD          0.000000"), std::string::npos) << k.out;
  EXPECT_NE(k.out.find("Same top-1         100.000000"), std::string::npos) << k.out;
  EXPECT_NE(k.out.find("PPL ratio            1.000000"), std::string::npos) << k.out;
  // Another model on the same text: a positive KLD.
  const Result o = perplexity("-m " + model_file("squeeze_ppl_other.gguf", 2) + " -f " + f.text +
                              " --ctx 64 --kl-divergence " + logits);
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.out.find("Mean KLD             0.000000"), std::string::npos) << o.out;
}

TEST(PerplexityCli, ArgumentAndInputErrors) {
  Files f;
  const std::string m = "-m " + f.model;
  expect_error(perplexity(m + " -f /nonexistent/text.txt"), "/nonexistent/text.txt");
  expect_error(perplexity("-m /nonexistent/m.gguf -f " + f.text), "/nonexistent/m.gguf");
  expect_error(perplexity(m), "--file");
  const std::string short_text = text_file("squeeze_ppl_short.txt", 100, 2);
  expect_error(perplexity(m + " -f " + short_text + " --ctx 64"), "needs at least 128");
  expect_error(perplexity(m + " -f " + f.text + " --ctx 4096"), "exceeds the model's 128");
  expect_error(perplexity(m + " -f " + f.text + " --ctx 64 --chunks 0"), "chunks");
  expect_error(perplexity(m + " -f " + f.text + " --save-logits a --kl-divergence b"),
                     "excludes");
  expect_error(perplexity(m + " -f " + f.text + " --kl-divergence /nonexistent/l.bin"),
                     "/nonexistent/l.bin");
  expect_error(perplexity(m + " -f " + f.text + " --ctx 64 --save-logits /nonexistent/d/l"),
                     "/nonexistent/d/l");
}

TEST(PerplexityCli, SavedLogitsMustMatchTheRun) {
  Files f;
  const std::string logits = tmp("squeeze_ppl_match.logits").string();
  const std::string run = "-m " + f.model + " -f " + f.text + " --ctx 64";
  ASSERT_EQ(perplexity(run + " --save-logits " + logits).rc, 0);
  const std::string kl = " --kl-divergence " + logits;
  const std::string other_text = text_file("squeeze_ppl_other.txt", 700, 3);
  expect_error(perplexity("-m " + f.model + " -f " + other_text + " --ctx 64" + kl),
                     "different text");
  expect_error(perplexity("-m " + f.model + " -f " + f.text + " --ctx 32" + kl), "--ctx 64");
  std::vector<std::string> vocab = testing::tiny_vocab();
  vocab[200] = "zz";  // same size, one token text changed
  expect_error(perplexity("-m " + model_file("squeeze_ppl_vocab.gguf", 1, vocab) + " -f " +
                                f.text + " --ctx 64" + kl),
                     "different vocabulary");

  const std::string good = slurp(logits);
  auto dump = [](const std::string& name, const std::string& bytes) {
    const fs::path p = tmp(name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  };
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  expect_error(perplexity("-m " + f.model + " -f " + f.text + " --ctx 64 --kl-divergence " +
                                dump("squeeze_ppl_flip.logits", flipped)),
                     "corrupt");
  expect_error(perplexity("-m " + f.model + " -f " + f.text + " --ctx 64 --kl-divergence " +
                                dump("squeeze_ppl_cut.logits", good.substr(0, good.size() - 100))),
                     "truncated");
  expect_error(perplexity("-m " + f.model + " -f " + f.text + " --ctx 64 --kl-divergence " +
                                f.text),
                     "not a squeeze saved-logits file");
}

}  // namespace
}  // namespace squeeze
