// `squeeze bench` end to end: bad arguments give one clear `error:` line and a non-zero exit;
// on the tiny model the JSON report parses and carries the documented fields; `--machine`
// measures positive limits, caches them, and bench then reports fractions of them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_run.h"
#include "core/cpu.h"
#include "eval/machine.h"
#include "formats/format.h"
#include "temp_dir.h"
#include "tiny_model.h"

namespace squeeze {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using Result = testing::CmdResult;
using testing::expect_clean_error;

Result bench(const std::string& args) { return testing::run_squeeze("bench " + args, "bench_cli"); }

const std::string& tiny() {
  static const std::string path = [] {
    const fs::path p = testing::temp_path("bench_cli_tiny.gguf");
    testing::write_tiny_model(p.string());
    return p.string();
  }();
  return path;
}

// A machine file in a fresh temporary directory, so tests never touch ~/.cache.
std::string machine_file(const std::string& name) {
  const fs::path d = testing::temp_path("bench_cli_" + name);
  fs::remove_all(d);
  return (d / "machine.json").string();
}

TEST(BenchCli, ArgumentErrors) {
  const std::string m = "-m " + tiny() + " --machine-file " + machine_file("args") + " ";
  expect_clean_error(bench(m + "-p -5"), "-p must be >= 0");
  expect_clean_error(bench(m + "-n -1"), "-n must be >= 0");
  expect_clean_error(bench(m + "-p 0 -n 0"), "nothing to run");
  expect_clean_error(bench(m + "-r 0"), "-r must be at least 1");
  expect_clean_error(bench(m + "-p abc"), "-p");
  expect_clean_error(bench(m + "-p 16,x"), "-p");
  expect_clean_error(bench(m + "-b 0"), "--batch");
  expect_clean_error(bench(m + "--roof-gbs -3"), "--roof-gbs must be a positive number");
  expect_clean_error(bench(m + "--roof-gflops 0"), "--roof-gflops must be a positive number");
  expect_clean_error(bench(m + "--bogus"), "--bogus");
  expect_clean_error(bench(m + "-p 512 -n 0"), "exceeds the model's context of 128");
  expect_clean_error(bench("-m /nonexistent/model.gguf -p 8 -n 0"), "/nonexistent/model.gguf");
}

TEST(BenchCli, JsonOnTinyModel) {
  const Result r = bench("-m " + tiny() + " -p 16,32 -n 8 -r 2 -t 2 --json --machine-file " +
                         machine_file("json"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["model"], tiny());
  EXPECT_EQ(j["threads"], 2);
  EXPECT_EQ(j["reps"], 2);
  EXPECT_EQ(j["n_ctx"], 32);
  EXPECT_GT(j["file_bytes"].get<double>(), 0);
  EXPECT_GT(j["weight_bytes"].get<double>(), 0);
  EXPECT_TRUE(j["isa"] == "amx" || j["isa"] == "avx512" || j["isa"] == "avx2" || j["isa"] == "scalar");
  EXPECT_TRUE(j["roof"].is_null());  // no machine file yet, no --roof-* flags
  ASSERT_EQ(j["results"].size(), 3u);
  const char* names[] = {"pp16", "pp32", "tg8"};
  for (size_t i = 0; i < 3; ++i) {
    const json& t = j["results"][i];
    EXPECT_EQ(t["test"], names[i]);
    EXPECT_EQ(t["samples_ts"].size(), 2u);
    EXPECT_EQ(t["samples_s"].size(), 2u);
    EXPECT_GT(t["avg_ts"].get<double>(), 0);
    EXPECT_GT(t["median_ts"].get<double>(), 0);
    EXPECT_GE(t["stddev_ts"].get<double>(), 0);
    EXPECT_TRUE(t["roof_fraction"].is_null());
    const bool pp = i < 2;
    EXPECT_EQ(t["n_prompt"].get<int>(), pp ? (i == 0 ? 16 : 32) : 0);
    EXPECT_EQ(t["n_gen"].get<int>(), pp ? 0 : 8);
    EXPECT_EQ(t["gflop_per_s"].is_null(), !pp);
    EXPECT_EQ(t["gb_per_s"].is_null(), pp);
    EXPECT_GT(t[pp ? "gflop_per_s" : "gb_per_s"].get<double>(), 0);
  }
  // Text mode prints the table.
  const Result txt = bench("-m " + tiny() + " -p 16 -n 4 -r 1 --machine-file " +
                           machine_file("text") + " --roof-gbs 10 --roof-gflops 50");
  ASSERT_EQ(txt.rc, 0) << txt.err;
  EXPECT_NE(txt.out.find("| pp16 |"), std::string::npos) << txt.out;
  EXPECT_NE(txt.out.find("| tg4 |"), std::string::npos) << txt.out;
  EXPECT_NE(txt.out.find("roof: read 10.0 GB/s"), std::string::npos) << txt.out;
}

TEST(BenchCli, MachineProbeIsCachedAndUsed) {
  const std::string file = machine_file("probe");
  const Result p =
      bench("--machine --probe-mib 8 --probe-quick -t 2 --json --machine-file " + file);
  ASSERT_EQ(p.rc, 0) << p.err;
  const json m = json::parse(p.out);
  ASSERT_EQ(m["by_threads"].size(), 2u);
  for (const json& t : m["by_threads"]) {
    EXPECT_GT(t["read_gb_per_s"].get<double>(), 0);
    EXPECT_GT(t["fma_gflop_per_s"].get<double>(), 0);
  }
  ASSERT_TRUE(fs::exists(file));

  const Result r =
      bench("-m " + tiny() + " -p 16 -n 4 -r 1 -t 2 --json --machine-file " + file);
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_FALSE(j["roof"].is_null());
  EXPECT_EQ(j["roof"]["source"], file);
  EXPECT_EQ(j["roof"]["read_gb_per_s"], m["by_threads"][1]["read_gb_per_s"]);
  // The prefill roof is the one of the tiny model's format on this CPU's tier.
  eval::ThreadLimits t;
  t.fma_gflop_per_s = m["by_threads"][1]["fma_gflop_per_s"];
  t.fma512_gflop_per_s = m["by_threads"][1]["fma512_gflop_per_s"];
  t.vnni_gop_per_s = m["by_threads"][1]["vnni_gop_per_s"];
  t.amx_int8_gop_per_s = m["by_threads"][1]["amx_int8_gop_per_s"];
  t.amx_bf16_gflop_per_s = m["by_threads"][1]["amx_bf16_gflop_per_s"];
  const auto type = formats::format_by_name(j["weights_type"].get<std::string>());
  ASSERT_NE(type, nullptr);
  const eval::PrefillRoof want = eval::prefill_roof(t, type->type, active_isa());
  EXPECT_EQ(j["roof"]["prefill_roof"], want.name);
  EXPECT_EQ(j["roof"]["prefill_gop_per_s"].get<double>(), want.gop_per_s);
  for (const json& t : j["results"]) EXPECT_GT(t["roof_fraction"].get<double>(), 0);

  // A thread count the file does not hold: no roof rather than a wrong one.
  const Result r3 = bench("-m " + tiny() + " -p 16 -n 0 -r 1 -t 3 --json --machine-file " + file);
  ASSERT_EQ(r3.rc, 0) << r3.err;
  EXPECT_TRUE(json::parse(r3.out)["roof"].is_null());

  std::ofstream(file) << "garbage";
  expect_clean_error(bench("-m " + tiny() + " -p 16 -n 0 -r 1 --machine-file " + file),
                     "malformed");
  fs::remove_all(fs::path(file).parent_path());
}

}  // namespace
}  // namespace squeeze
