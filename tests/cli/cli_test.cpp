// The squeeze binary end to end: bad input gives one clear `error:` line on stderr and a
// non-zero exit, never a crash; good input on the tiny model generates text.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cstdlib>
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
using testing::expect_clean_error;

Result squeeze_cmd(const std::string& args, const std::string& input = "") {
  return testing::run_squeeze(args, "cli", input);
}

std::vector<uint8_t> tiny_bytes() { return testing::tiny_model_writer().to_bytes(); }

std::string write_file(const std::string& name, const std::vector<uint8_t>& bytes) {
  const fs::path p = testing::temp_path(name);
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                           static_cast<std::streamsize>(bytes.size()));
  return p.string();
}

TEST(Cli, GeneratesOnTinyModel) {
  const std::string m = write_file("squeeze_cli_tiny.gguf", tiny_bytes());
  const Result r = squeeze_cmd("run -m " + m + " -p 'hello there' -n 8 --temp 0 --ctx 64");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("prompt: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stop: "), std::string::npos) << r.err;
  // Greedy is deterministic; a seeded sample too.
  EXPECT_EQ(squeeze_cmd("run -m " + m + " -p 'hello there' -n 8 --temp 0 --ctx 64").out, r.out);
  const std::string sampled = "run -m " + m + " -p hello -n 12 --temp 1 --seed 5 --ctx 64";
  EXPECT_EQ(squeeze_cmd(sampled).out, squeeze_cmd(sampled).out);
}

TEST(Cli, ChatLoopAnswersAndQuits) {
  const std::string m = write_file("squeeze_cli_chat.gguf", tiny_bytes());
  const Result r = squeeze_cmd("chat -m " + m + " -n 4 --temp 0 --ctx 128", "hello\nthe\n/quit\n");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '>'), 3) << r.out;  // three prompts shown
}

TEST(Cli, TruncatedFile) {
  auto b = tiny_bytes();
  for (size_t cut : {size_t{3}, size_t{20}, b.size() / 3, b.size() - 7}) {
    const std::string m = write_file("squeeze_cli_trunc.gguf", {b.begin(), b.begin() + cut});
    const Result r = squeeze_cmd("run -m " + m + " -p hi -n 1");
    expect_clean_error(r, "squeeze_cli_trunc.gguf");
  }
}

TEST(Cli, WrongMagic) {
  auto b = tiny_bytes();
  b[0] = 'X';
  expect_clean_error(squeeze_cmd("run -m " + write_file("squeeze_cli_magic.gguf", b) + " -p hi"), "magic");
}

TEST(Cli, UnsupportedVersion) {
  auto b = tiny_bytes();
  b[4] = 99;  // version (little-endian u32 after the magic)
  expect_clean_error(squeeze_cmd("run -m " + write_file("squeeze_cli_ver.gguf", b) + " -p hi"), "version");
}

// Patches the u32 that follows the dims of tensor `name` in the header (its type id).
void patch_tensor_type(std::vector<uint8_t>& b, const std::string& name, uint32_t type) {
  const auto it = std::search(b.begin(), b.end(), name.begin(), name.end());
  ASSERT_NE(it, b.end());
  size_t p = static_cast<size_t>(it - b.begin()) + name.size();
  uint32_t n_dims;
  std::memcpy(&n_dims, &b[p], 4);
  p += 4 + 8 * n_dims;
  std::memcpy(&b[p], &type, 4);
}

TEST(Cli, UnknownTensorType) {
  auto b = tiny_bytes();
  patch_tensor_type(b, "output_norm.weight", 99);
  expect_clean_error(squeeze_cmd("run -m " + write_file("squeeze_cli_type.gguf", b) + " -p hi"), "type");
  expect_clean_error(squeeze_cmd("inspect " + write_file("squeeze_cli_type.gguf", b)), "type");
}

TEST(Cli, TensorDataPastEndOfFile) {
  auto b = tiny_bytes();
  b.resize(b.size() - 1);  // the last tensor's data now ends past the end
  expect_clean_error(squeeze_cmd("run -m " + write_file("squeeze_cli_past.gguf", b) + " -p hi"), "past the end");
}

TEST(Cli, MissingRequiredKey) {
  testing::TinyModelSpec spec;
  spec.skip_keys = {"llama.block_count"};
  const std::string m = write_file("squeeze_cli_key.gguf", testing::tiny_model_writer(spec).to_bytes());
  expect_clean_error(squeeze_cmd("run -m " + m + " -p hi"), "llama.block_count");
}

TEST(Cli, PromptLongerThanContext) {
  const std::string m = write_file("squeeze_cli_ctx.gguf", tiny_bytes());
  expect_clean_error(squeeze_cmd("run -m " + m + " -p 'a b c d e f g h i j k l' -n 0 --ctx 4"), "context");
  expect_clean_error(squeeze_cmd("run -m " + m + " -p 'a b' -n 100 --ctx 16"), "context");
}

TEST(Cli, BadFlagsAndFiles) {
  const std::string m = write_file("squeeze_cli_flags.gguf", tiny_bytes());
  expect_clean_error(squeeze_cmd("run -m " + m + " -p hi --temp abc"), "temp");
  expect_clean_error(squeeze_cmd("run -m " + m + " -p hi --top-p 2"), "top-p");
  expect_clean_error(squeeze_cmd("run -m " + m + " -p hi --bogus"), "bogus");
  expect_clean_error(squeeze_cmd("run -m /nonexistent/model.gguf -p hi"), "/nonexistent/model.gguf");
  expect_clean_error(squeeze_cmd("frobnicate"), "frobnicate");
  const Result r = squeeze_cmd("run --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("--prompt"), std::string::npos);
}

// The KV cache options: a quantized cache runs; bad names, groups and quantizer options without
// a quantized type are clear errors.
TEST(Cli, KvCacheOptions) {
  const std::string m = write_file("squeeze_cli_kv.gguf", tiny_bytes());
  const Result r = squeeze_cmd("run -m " + m + " -p 'hello there' -n 8 --temp 0 --ctx 64 --kv-type q4 "
                               "--kv-group 16 --kv-recent 0 --kv-outliers 0.01 --kv-k-prerope");
  EXPECT_EQ(r.rc, 0) << r.err;
  expect_clean_error(squeeze_cmd("run -m " + m + " -p hi --kv-type q5"), "q5");
  expect_clean_error(squeeze_cmd("run -m " + m + " -p hi --kv-type q4 --kv-k-axis head"), "head");
  expect_clean_error(squeeze_cmd("run -m " + m + " -p hi --ctx 64 --kv-type q4 --kv-group 24"), "--kv-group 24");
  expect_clean_error(squeeze_cmd("run -m " + m + " -p hi --kv-recent 64"), "--kv-recent");
  expect_clean_error(squeeze_cmd("bench -m " + m + " -p 16 -n 0 --kv-sinks 4"), "--kv-sinks");
  expect_clean_error(squeeze_cmd("bench -m " + m + " -p 16 -n 0 --kv-outliers 0.01"), "--kv-outliers");
  expect_clean_error(squeeze_cmd("bench -m " + m + " -p 16 -n 0 --kv-k-prerope"), "--kv-k-prerope");
  expect_clean_error(squeeze_cmd("run -m " + m + " -p hi --ctx 64 --kv-type q4 --kv-group 16 --kv-outliers 0.7"),
                     "--kv-outliers");
}

// A KV codebook: calibrate-kv writes a copy of the model holding one, which --kv-codebook runs
// with; a model without one (or one of other bits), q8, and options calibrate-kv does not read
// are clear errors.
TEST(Cli, KvCodebook) {
  const std::string m = write_file("squeeze_cli_kvcb.gguf", tiny_bytes());
  std::string words;
  for (int i = 0; i < 60; ++i) words += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + ". ";
  const std::string text = write_file("squeeze_cli_kvcb.txt", std::vector<uint8_t>(words.begin(), words.end()));
  const std::string out = testing::temp_path("squeeze_cli_kvcb_out.gguf");
  fs::remove(out);
  const std::string calib = "calibrate-kv -m " + m + " -f " + text + " --samples 2 --ctx 48 --kv-group 16 ";
  Result r = squeeze_cmd(calib + "--kv-type q2 -o " + out);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("fitted"), std::string::npos) << r.out;
  const std::string run = "run -p 'hello there' -n 8 --temp 0 --ctx 64 --kv-group 16 --kv-recent 0 ";
  r = squeeze_cmd(run + "-m " + out + " --kv-type q2 --kv-codebook");
  EXPECT_EQ(r.rc, 0) << r.err;
  expect_clean_error(squeeze_cmd(run + "-m " + m + " --kv-type q2 --kv-codebook"), "calibrate-kv");
  expect_clean_error(squeeze_cmd(run + "-m " + out + " --kv-type q4 --kv-codebook"), "q4");
  expect_clean_error(squeeze_cmd(run + "-m " + out + " --kv-type q8 --kv-codebook"), "q8");
  expect_clean_error(squeeze_cmd("run -p hi --ctx 64 -m " + out + " --kv-codebook"), "--kv-codebook");
  expect_clean_error(squeeze_cmd(calib + "--kv-type q2 --kv-recent 0 -o " + out + ".2"), "--kv-recent");
  expect_clean_error(squeeze_cmd(calib + "--kv-type q8 -o " + out + ".2"), "q4 or q2");
  expect_clean_error(squeeze_cmd(calib + "--kv-type q2"), "--output");
  EXPECT_FALSE(fs::exists(out + ".2"));
}

// Token eviction: a run past the budget works and the generation goes on; bad policies and
// budgets, options without --kv-evict or foreign to the policy, and a quantized cache are clear
// errors.
TEST(Cli, KvEvictionOptions) {
  const std::string m = write_file("squeeze_cli_evict.gguf", tiny_bytes());
  for (const char* p : {"streaming", "h2o", "snapkv", "vatp", "a2sf", "keyformer"}) {
    const Result r = squeeze_cmd("run -m " + m + " -p 'hello there, how are you' -n 40 --temp 0 "
                                 "--ctx 128 --kv-evict " + std::string(p) + " --kv-budget 0.25");
    EXPECT_EQ(r.rc, 0) << p << ": " << r.err;
  }
  const std::string run = "run -m " + m + " -p hi --ctx 128 ";
  expect_clean_error(squeeze_cmd(run + "--kv-evict lru --kv-budget 16"), "lru");
  expect_clean_error(squeeze_cmd(run + "--kv-evict h2o"), "--kv-budget");
  expect_clean_error(squeeze_cmd(run + "--kv-budget 16"), "--kv-evict");
  expect_clean_error(squeeze_cmd(run + "--kv-evict h2o --kv-budget 1.5"), "1.5");
  expect_clean_error(squeeze_cmd(run + "--kv-evict h2o --kv-budget 0"), "--kv-budget");
  expect_clean_error(squeeze_cmd(run + "--kv-evict h2o --kv-budget 16 --kv-evict-alpha 0.5"), "--kv-evict-alpha");
  expect_clean_error(squeeze_cmd(run + "--kv-evict-window 8"), "--kv-evict-window");
  expect_clean_error(squeeze_cmd(run + "--kv-evict keyformer --kv-budget 16 --kv-evict-tau 0"), "tau");
  expect_clean_error(squeeze_cmd(run + "--kv-evict keyformer --kv-budget 16 --kv-evict-tau-end -1"), "tau-end");
  expect_clean_error(squeeze_cmd(run + "--kv-evict h2o --kv-budget 16 --kv-evict-tau-end 2"), "--kv-evict-tau-end");
  const Result annealed = squeeze_cmd("run -m " + m + " -p 'hello there, how are you' -n 40 --temp 0 --ctx 128 "
                                      "--kv-evict keyformer --kv-budget 0.25 --kv-evict-tau-end 2");
  EXPECT_EQ(annealed.rc, 0) << annealed.err;
  expect_clean_error(squeeze_cmd(run + "--kv-evict snapkv --kv-budget 64 --kv-evict-pool 4"), "pooling");
  expect_clean_error(squeeze_cmd(run + "--kv-evict h2o --kv-budget 16 --kv-type q4 --kv-group 16"), "f16");
  expect_clean_error(squeeze_cmd("serve -m " + m + " --kv-evict h2o"), "--kv-evict");
}

// serve sized by memory: too little for one sequence, or with --kv-tokens too, is an error.
TEST(Cli, ServeKvMib) {
  const std::string m = write_file("squeeze_cli_kvmib.gguf", tiny_bytes());
  expect_clean_error(squeeze_cmd("serve -m " + m + " --ctx 64 --kv-mib 0.001"), "--kv-mib");
  expect_clean_error(squeeze_cmd("serve -m " + m + " --ctx 64 --kv-mib 1 --kv-tokens 128"), "--kv-tokens");
  expect_clean_error(squeeze_cmd("serve -m " + m + " --ctx 64 --kv-mib 0.01 --kv-type q4 --kv-group 16"), "--kv-mib");
}

// `squeeze --help` names every value SQUEEZE_ISA takes (core/cpu.cpp: scalar, avx2, avx512, amx).
TEST(Cli, TopLevelHelpNamesEveryIsa) {
  const Result r = squeeze_cmd("--help");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("SQUEEZE_ISA=scalar|avx2|avx512|amx"), std::string::npos) << r.out;
}

TEST(Cli, InspectPrintsMetadataAndTensors) {
  const std::string m = write_file("squeeze_cli_inspect.gguf", tiny_bytes());
  const Result r = squeeze_cmd("inspect " + m);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("general.architecture"), std::string::npos);
  EXPECT_NE(r.out.find("blk.1.ffn_down.weight"), std::string::npos);
  EXPECT_NE(r.out.find("q8_0"), std::string::npos);
}

}  // namespace
}  // namespace squeeze
