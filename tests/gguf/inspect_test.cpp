// squeeze inspect, called in-process: output on a small crafted file, errors, --help.
#include <gtest/gtest.h>

#include <cctype>
#include <vector>

#include "cli/commands.h"
#include "gguf_test_util.h"

namespace squeeze::gguf {
namespace {

using testing::TempFile;

struct Result {
  int rc;
  std::string out, err;
};

Result run_inspect(std::vector<std::string> args) {
  args.insert(args.begin(), "inspect");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc = cli::cmd_inspect(static_cast<int>(args.size()), argv.data());
  Result r{rc, ::testing::internal::GetCapturedStdout(), ::testing::internal::GetCapturedStderr()};
  return r;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

TEST(GgufInspect, PrintsMetadataAndTensors) {
  Writer w;
  w.add_string("general.architecture", "llama");
  w.add_uint32("llama.block_count", 30);
  w.add_float32("llama.rope.freq_base", 10000.5f);
  w.add_string("tokenizer.chat_template", std::string(500, 'x') + "\n");
  std::vector<std::string> tokens;
  for (int i = 0; i < 100; ++i) tokens.push_back("tok" + std::to_string(i));
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_tensor("token_embd.weight", formats::DType::Q8_0, {64, 3}, testing::iota_bytes(34 * 2 * 3));
  w.add_tensor("blk.0.odd", formats::DType::Q3_K, {256}, testing::iota_bytes(110));
  TempFile file;
  file.write(w.to_bytes());

  const Result r = run_inspect({file.path()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  for (const char* s : {"GGUF version 3", "alignment 32", "general.architecture", "\"llama\"",
                        "llama.block_count", "30", "10000.5", "string[100]",
                        "[\"tok0\", \"tok1\", \"tok2\", \"tok3\", \"tok4\", \"tok5\", ...]",
                        "... (501 bytes)", "token_embd.weight", "q8_0", "[64, 3]", "204",
                        "q3_k*", "tensors: 2", "total: 2 tensors, 448 elements"}) {
    // Case-insensitive: format names follow ggml's spelling ("q3_K").
    EXPECT_NE(lower(r.out).find(lower(s)), std::string::npos) << "missing '" << s << "' in:\n" << r.out;
  }
  EXPECT_EQ(r.out.find(std::string(100, 'x')), std::string::npos) << "long string not shortened";

  const Result brief = run_inspect({file.path(), "--no-tensors", "-n", "2"});
  EXPECT_EQ(brief.rc, 0);
  EXPECT_EQ(brief.out.find("token_embd.weight"), std::string::npos);
  EXPECT_NE(brief.out.find("[\"tok0\", \"tok1\", ...]"), std::string::npos) << brief.out;
}

TEST(GgufInspect, ErrorsAreOneLine) {
  TempFile file;
  file.write({'n', 'o', 'p', 'e', 0, 0, 0, 0});
  const Result bad = run_inspect({file.path()});
  EXPECT_NE(bad.rc, 0);
  EXPECT_EQ(bad.out, "");
  EXPECT_EQ(bad.err, "error: " + file.path() + ": not a GGUF file (bad magic)\n");

  const Result missing = run_inspect({file.path() + ".missing"});
  EXPECT_NE(missing.rc, 0);
  EXPECT_EQ(missing.err.rfind("error: ", 0), 0u) << missing.err;

  const Result no_args = run_inspect({});
  EXPECT_NE(no_args.rc, 0);
  EXPECT_EQ(no_args.err.rfind("error: ", 0), 0u) << no_args.err;
}

TEST(GgufInspect, Help) {
  const Result r = run_inspect({"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("squeeze inspect"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace squeeze::gguf
