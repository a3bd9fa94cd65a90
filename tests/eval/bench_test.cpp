// eval/bench and eval/machine as a library: argument checks, the counted work against a hand
// computation, a bench run on the tiny model, the JSON report, the machine probe and its cache.
// No timing assertions: only that times are positive and the bookkeeping is consistent.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"
#include "core/thread_pool.h"
#include "eval/bench.h"
#include "eval/machine.h"
#include "eval/machine_kernels.h"
#include "model/context.h"
#include "model/model.h"
#include "require_file.h"
#include "temp_dir.h"
#include "tiny_model.h"

namespace squeeze::eval {
namespace {

namespace fs = std::filesystem;

std::string tiny_model_path(const testing::TinyModelSpec& spec = {}) {
  const fs::path p = testing::temp_path(spec.tied_output ? "bench_tiny.gguf" : "bench_tiny_untied.gguf");
  testing::write_tiny_model(p.string(), spec);
  return p.string();
}

// Whether name is "blk.<digits>.<one of kinds>.weight". (Plain string matching: std::regex
// trips GCC 12's -Wmaybe-uninitialized inside libstdc++ under -fsanitize=address.)
bool is_block_tensor(const std::string& name, std::initializer_list<std::string_view> kinds) {
  const std::string_view prefix = "blk.", suffix = ".weight";
  std::string_view s = name;
  if (!s.starts_with(prefix) || !s.ends_with(suffix)) return false;
  s = s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
  const size_t dot = s.find('.');
  if (dot == 0 || dot == std::string_view::npos) return false;
  for (size_t i = 0; i < dot; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  const std::string_view kind = s.substr(dot + 1);
  for (std::string_view k : kinds) {
    if (kind == k) return true;
  }
  return false;
}

// The weight bytes one token's decode reads, from the file's tensor table alone: each tensor's
// elements / its type's block size * bytes per block (formats::format_info), for the 7 matrices
// of every block (attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down) and the head:
// output.weight, or token_embd.weight when the file has none (a tied head reads the whole
// embedding matrix). Not counted, as gen_bytes_per_token documents: the F32 norms (attn_norm,
// ffn_norm, output_norm) and the one row of token_embd.weight the token looks up. Every tensor
// of the file must be one or the other.
double decode_bytes_from_tensor_table(const std::string& path) {
  const gguf::File f = gguf::File::open(path);
  const int64_t n_layer = f.require_int("llama.block_count");
  const bool tied = f.find_tensor("output.weight") == nullptr;
  double counted = 0;
  int64_t n_matrices = 0, n_heads = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const formats::FormatInfo& info = formats::format_info(t.type);
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    EXPECT_EQ(n % info.block_size, 0) << t.name;
    const double bytes = static_cast<double>(n / info.block_size) * static_cast<double>(info.block_bytes);
    if (is_block_tensor(t.name, {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                                 "ffn_down"})) {
      counted += bytes;
      ++n_matrices;
    } else if (t.name == "output.weight" || (tied && t.name == "token_embd.weight")) {
      counted += bytes;
      ++n_heads;
    } else if (!is_block_tensor(t.name, {"attn_norm", "ffn_norm"}) && t.name != "output_norm.weight" &&
               t.name != "token_embd.weight") {
      ADD_FAILURE() << path << ": tensor " << t.name << " is neither counted nor listed as not read";
    }
  }
  EXPECT_EQ(n_matrices, 7 * n_layer) << path;
  EXPECT_EQ(n_heads, 1) << path;
  return counted;
}

TEST(BenchTests, ArgumentChecks) {
  BenchOptions o;
  o.n_prompt = {128, 0, 512};
  o.n_gen = {0, 64};
  const auto t = bench_tests(o);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].name(), "pp128");
  EXPECT_EQ(t[1].name(), "pp512");
  EXPECT_EQ(t[2].name(), "tg64");
  EXPECT_EQ(bench_ctx_size(t), 512);

  BenchOptions par = o;
  par.parallel = {1, 4};
  const auto tp = bench_tests(par);
  ASSERT_EQ(tp.size(), 4u);  // pp128, pp512, tg64, tg64x4
  EXPECT_EQ(tp[2].name(), "tg64");
  EXPECT_EQ(tp[3].name(), "tg64x4");
  EXPECT_EQ(bench_n_seq(tp), 4);

  BenchOptions deep = o;
  deep.depth = {0, 1000};
  const auto td = bench_tests(deep);
  ASSERT_EQ(td.size(), 6u);
  EXPECT_EQ(td[1].name(), "pp128@d1000");
  EXPECT_EQ(td[5].name(), "tg64@d1000");
  EXPECT_EQ(bench_ctx_size(td), 1512);

  BenchOptions bad = o;
  bad.parallel = {0};
  EXPECT_THROW(bench_tests(bad), UsageError);
  bad = o;
  bad.n_prompt = {-1};
  EXPECT_THROW(bench_tests(bad), UsageError);
  bad = o;
  bad.n_gen = {-5};
  EXPECT_THROW(bench_tests(bad), UsageError);
  bad = o;
  bad.reps = 0;
  EXPECT_THROW(bench_tests(bad), UsageError);
  bad = o;
  bad.depth = {-1};
  EXPECT_THROW(bench_tests(bad), UsageError);
  bad = o;
  bad.n_prompt = {0};
  bad.n_gen = {0};
  EXPECT_THROW(bench_tests(bad), UsageError);
}

TEST(BenchWork, CountsMatchHandComputation) {
  const auto model = model::Model::load(tiny_model_path());
  const model::HParams& hp = model->hparams();
  ASSERT_EQ(hp.n_embd, 64);
  ASSERT_EQ(hp.n_ff, 128);
  ASSERT_EQ(hp.n_layer, 2);
  const double n_q = static_cast<double>(hp.n_head * hp.head_dim);
  const double n_kv = static_cast<double>(hp.n_head_kv * hp.head_dim);
  // Per token and layer: wq, wk, wv, wo, then gate, up, down.
  const double layer = 64 * n_q + 2 * 64 * n_kv + n_q * 64 + 3 * 64 * 128;
  const double head = 64.0 * static_cast<double>(hp.n_vocab);
  // 3 tokens see 1 + 2 + 3 = 6 positions; q.k and p.v are head_dim MACs each per position.
  const double attn = 2.0 * 4 * 2 * static_cast<double>(hp.head_dim) * 6;
  EXPECT_DOUBLE_EQ(prompt_flop(*model, 3), 2 * (3 * 2 * layer + head + attn));
}

// gen_bytes_per_token against the count from the tensor table, on the tiny model tied and untied
// (Q8_0: 34 bytes per 32 weights) and on the real model.
TEST(BenchWork, GenBytesMatchTheTensorTable) {
  for (bool tied : {true, false}) {
    testing::TinyModelSpec spec;
    spec.tied_output = tied;
    const std::string path = tiny_model_path(spec);
    const auto model = model::Model::load(path);
    const double expect = decode_bytes_from_tensor_table(path);
    // By hand: per layer 64x64 (q, o) + 2 x 64x32 (k, v) + 3 x 64x128, plus the 64 x n_vocab head.
    const double n_vocab = static_cast<double>(model->hparams().n_vocab);
    EXPECT_DOUBLE_EQ(expect, (2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128) + 64 * n_vocab) / 32 * 34);
    EXPECT_DOUBLE_EQ(gen_bytes_per_token(*model), expect) << (tied ? "tied" : "untied");
  }
}

TEST(BenchWork, GenBytesMatchTheTensorTableOfTheRealModel) {
  const std::string path = squeeze::testing::default_model();
  SQUEEZE_REQUIRE_FILE(path);
  const auto model = model::Model::load(path);
  const double expect = decode_bytes_from_tensor_table(path);
  EXPECT_DOUBLE_EQ(gen_bytes_per_token(*model), expect);
  std::printf("  %s: %.0f bytes per token\n", path.c_str(), expect);
}

TEST(BenchRun, TinyModelGivesPositiveSpeeds) {
  const std::string path = tiny_model_path();
  const auto model = model::Model::load(path);
  ThreadPool pool(2);
  model::Context ctx(*model, 32, pool, 16);
  BenchReport rep = make_report(*model, path, pool.size(), 16, 32, 3);
  for (const BenchTest& t : {BenchTest{BenchKind::Prompt, 32}, BenchTest{BenchKind::Gen, 8}}) {
    const BenchResult r = run_bench(ctx, t, 3, true, 7);
    ASSERT_EQ(r.samples_ts.size(), 3u);
    ASSERT_EQ(r.samples_s.size(), 3u);
    for (double s : r.samples_s) EXPECT_GT(s, 0);
    const auto [lo, hi] = std::minmax_element(r.samples_ts.begin(), r.samples_ts.end());
    EXPECT_GE(r.avg_ts, *lo);
    EXPECT_LE(r.avg_ts, *hi);
    EXPECT_GE(r.median_ts, *lo);
    EXPECT_LE(r.median_ts, *hi);
    EXPECT_GE(r.stddev_ts, 0);
    EXPECT_EQ(r.gb_per_s.has_value(), t.kind == BenchKind::Gen);
    EXPECT_EQ(r.gflop_per_s.has_value(), t.kind == BenchKind::Prompt);
    EXPECT_EQ(ctx.n_past(), t.n_tokens);  // the last repetition ran from an empty context
    rep.results.push_back(r);
  }
  // Several sequences at once: each decodes n tokens; t/s counts all of them, the weights are
  // read once per step.
  {
    model::Context ctx2(*model, 32, pool, 16, 3);
    const BenchResult r = run_bench(ctx2, {BenchKind::Gen, 8, 3}, 2, true, 7);
    ASSERT_EQ(r.samples_s.size(), 2u);
    EXPECT_NEAR(r.samples_ts[0], 24.0 / r.samples_s[0], 1e-6 * r.samples_ts[0]);
    for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(ctx2.n_past(s), 8) << s;
    EXPECT_NEAR(*r.gb_per_s, gen_bytes_per_token(*model) * r.avg_ts / 3 / 1e9, 1e-9);
    // At a depth every repetition starts from the depth's tokens; past the context it is refused.
    const BenchResult d = run_bench(ctx2, {BenchKind::Gen, 8, 3, 16}, 2, true, 7);
    ASSERT_EQ(d.samples_s.size(), 2u);
    for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(ctx2.n_past(s), 24) << s;
    EXPECT_THROW(run_bench(ctx2, {BenchKind::Gen, 8, 3, 25}, 1, false, 1), UsageError);
    // More sequences than the context holds are refused.
    EXPECT_THROW(run_bench(ctx2, {BenchKind::Gen, 8, 4}, 1, false, 1), UsageError);
  }
  // A test larger than the context is refused before it runs.
  EXPECT_THROW(run_bench(ctx, {BenchKind::Prompt, 33}, 1, false, 1), UsageError);

  rep.roof = Roof{20.0, 100.0, "test prefill roof", 300.0, "test"};
  const auto j = nlohmann::json::parse(report_json(rep));
  for (const char* k : {"model", "file_bytes", "weight_bytes", "weights_type", "threads", "isa",
                        "n_batch", "n_ctx", "reps", "roof", "results"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["weights_type"], "q8_0");
  ASSERT_EQ(j["results"].size(), 2u);
  const auto& pp = j["results"][0];
  const auto& tg = j["results"][1];
  EXPECT_EQ(pp["test"], "pp32");
  EXPECT_EQ(tg["test"], "tg8");
  EXPECT_GT(pp["gflop_per_s"].get<double>(), 0);
  EXPECT_TRUE(pp["gb_per_s"].is_null());
  EXPECT_GT(tg["gb_per_s"].get<double>(), 0);
  EXPECT_NEAR(tg["roof_fraction"].get<double>(), tg["gb_per_s"].get<double>() / 20.0, 1e-12);
  // pp against the prefill roof, not the FP32 FMA one.
  EXPECT_NEAR(pp["roof_fraction"].get<double>(), pp["gflop_per_s"].get<double>() / 300.0, 1e-12);
  EXPECT_EQ(j["roof"]["prefill_roof"], "test prefill roof");
  EXPECT_NE(report_text(rep).find("| tg8 |"), std::string::npos);
}

ProbeOptions small_probe() {
  ProbeOptions o;
  o.buffer_bytes = size_t{4} << 20;
  o.passes = 2;
  o.fma_iters = 1 << 12;
  o.fma_chunks_per_thread = 2;
  return o;
}

TEST(MachineProbe, PositiveNumbersScalarAndAvx2) {
  std::vector<Isa> isas = {Isa::Scalar};
  if (cpu_has_avx2()) isas.push_back(Isa::Avx2);
  for (Isa isa : isas) {
    const MachineLimits m = measure_machine(2, isa, small_probe());
    EXPECT_EQ(m.isa, isa_name(isa));
    ASSERT_EQ(m.by_threads.size(), 2u);
    EXPECT_EQ(m.by_threads[0].threads, 1);
    EXPECT_EQ(m.by_threads[1].threads, 2);
    for (const ThreadLimits& t : m.by_threads) {
      EXPECT_GT(t.read_gb_per_s, 0) << isa_name(isa);
      EXPECT_GT(t.fma_gflop_per_s, 0) << isa_name(isa);
    }
  }
  EXPECT_THROW(measure_machine(0, Isa::Scalar, small_probe()), UsageError);
}

// The wide tiers also measure their compute roofs, and only theirs.
TEST(MachineProbe, WideRoofsOfTheAvx512AndAmxTiers) {
  const ThreadLimits scalar = measure_machine(1, Isa::Scalar, small_probe()).by_threads[0];
  EXPECT_EQ(scalar.fma512_gflop_per_s + scalar.vnni_gop_per_s + scalar.amx_int8_gop_per_s +
                scalar.amx_bf16_gflop_per_s,
            0);
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512";
  const ThreadLimits v = measure_machine(1, Isa::Avx512, small_probe()).by_threads[0];
  EXPECT_GT(v.fma512_gflop_per_s, 0);
  EXPECT_GT(v.vnni_gop_per_s, 0);
  EXPECT_EQ(v.amx_int8_gop_per_s, 0);
  EXPECT_EQ(v.amx_bf16_gflop_per_s, 0);
  if (!cpu_has_amx()) GTEST_SKIP() << "no AMX";
  const ThreadLimits a = measure_machine(1, Isa::Amx, small_probe()).by_threads[0];
  EXPECT_GT(a.amx_int8_gop_per_s, 0);
  EXPECT_GT(a.amx_bf16_gflop_per_s, 0);
  // Tiles multiply far more per instruction than vectors (8-16x on these CPUs).
  EXPECT_GT(a.amx_int8_gop_per_s, 2 * a.vnni_gop_per_s);
}

TEST(MachineProbe, PrefillRoofFollowsTheKernels) {
  ThreadLimits t{1, 10, 100, 200, 400, 3000, 1500};
  using formats::DType;
  EXPECT_EQ(prefill_roof(t, DType::Q4_0, Isa::Amx).name, "AMX int8");
  EXPECT_EQ(prefill_roof(t, DType::Q4_0, Isa::Amx).gop_per_s, 3000);
  EXPECT_EQ(prefill_roof(t, DType::Q8_0, Isa::Amx).gop_per_s, 3000);
  EXPECT_EQ(prefill_roof(t, DType::F16, Isa::Amx).gop_per_s, 1500);
  EXPECT_EQ(prefill_roof(t, DType::Q4_1, Isa::Amx).gop_per_s, 400);  // VNNI tiles on amx too
  EXPECT_EQ(prefill_roof(t, DType::Q8_0, Isa::Avx512).gop_per_s, 400);
  EXPECT_EQ(prefill_roof(t, DType::SQ3_G64, Isa::Avx512).gop_per_s, 400);
  EXPECT_EQ(prefill_roof(t, DType::Q4_0, Isa::Avx512).gop_per_s, 400);
  EXPECT_EQ(prefill_roof(t, DType::F16, Isa::Avx512).gop_per_s, 200);
  EXPECT_EQ(prefill_roof(t, DType::Q4_K, Isa::Avx512).gop_per_s, 100);  // AVX2 dot products
  EXPECT_EQ(prefill_roof(t, DType::Q4_0, Isa::Avx2).gop_per_s, 100);
  // A file without the wide roofs (an older version's): the FP32 FMA roof.
  const ThreadLimits old{1, 10, 100};
  EXPECT_EQ(prefill_roof(old, DType::Q4_0, Isa::Amx).name, "FP32 FMA");
  EXPECT_EQ(prefill_roof(old, DType::Q4_0, Isa::Amx).gop_per_s, 100);
}

#if defined(__x86_64__)
TEST(MachineProbe, ReadKernelsAgreeOnTheChecksum) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  std::vector<uint64_t> w(4096);
  uint64_t expect = 0;
  for (size_t i = 0; i < w.size(); ++i) expect += w[i] = i * 0x9e3779b97f4a7c15ull;
  // Every word is read exactly once by either kernel (the sum wraps the same way).
  EXPECT_EQ(detail::stream_read_scalar(w.data(), w.size()), expect);
  EXPECT_EQ(detail::stream_read_avx2(w.data(), w.size()), expect);
}
#endif

TEST(MachineFile, RoundTripMergeAndErrors) {
  const fs::path p = fs::path(testing::temp_path("bench_machine")) / "machine.json";
  fs::remove_all(p.parent_path());
  EXPECT_FALSE(read_machine_file(p.string()).has_value());
  EXPECT_FALSE(cached_limits(p.string(), Isa::Scalar, 1).has_value());

  MachineLimits a{"scalar", 1024, "2026-01-01", {{1, 10.0, 20.0}, {2, 15.0, 40.0}}};
  write_machine_file(p.string(), a);  // creates the directory
  MachineLimits b{"scalar", 2048, "2026-01-02", {{2, 16.0, 41.0}}};
  write_machine_file(p.string(), b);  // replaces the 2-thread entry, keeps the 1-thread one
  const auto one = cached_limits(p.string(), Isa::Scalar, 1);
  const auto two = cached_limits(p.string(), Isa::Scalar, 2);
  ASSERT_TRUE(one && two);
  EXPECT_EQ(one->read_gb_per_s, 10.0);
  EXPECT_EQ(two->read_gb_per_s, 16.0);
  EXPECT_EQ(two->fma_gflop_per_s, 41.0);
  EXPECT_FALSE(cached_limits(p.string(), Isa::Avx2, 2).has_value());
  EXPECT_EQ(read_machine_file(p.string())->size(), 2u);

  // Files of older versions carry no wide roofs: they read as 0.
  {
    std::ofstream(p) << R"({"entries": [{"isa": "avx512", "threads": 1, "read_gb_per_s": 5,)"
                     << R"( "fma_gflop_per_s": 6, "buffer_bytes": 8, "date": "2026-01-01"}]})";
  }
  const auto old = cached_limits(p.string(), Isa::Avx512, 1);
  ASSERT_TRUE(old);
  EXPECT_EQ(old->fma_gflop_per_s, 6.0);
  EXPECT_EQ(old->vnni_gop_per_s, 0.0);
  MachineLimits c{"avx512", 8, "2026-01-03", {{1, 5.0, 6.0, 7.0, 8.0, 0.0, 0.0}}};
  write_machine_file(p.string(), c);
  EXPECT_EQ(cached_limits(p.string(), Isa::Avx512, 1)->vnni_gop_per_s, 8.0);

  std::ofstream(p) << "{ not json";
  EXPECT_THROW(read_machine_file(p.string()), FormatError);
  std::ofstream(p) << R"({"entries": [{"isa": "avx2"}]})";
  EXPECT_THROW(read_machine_file(p.string()), FormatError);
  fs::remove_all(p.parent_path());
}

}  // namespace
}  // namespace squeeze::eval
