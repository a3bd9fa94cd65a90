// squeeze bench, in the manner of llama-bench: prompt processing (pp: n random tokens decoded
// from an empty context in one call) and generation (tg: n tokens decoded one at a time from an
// empty context), tokens/s over repetitions after a warm-up; plus what the hardware did:
// GB/s of weights read in tg, GFLOP/s of matmuls and attention in pp (counted from the shapes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/context.h"
#include "model/model.h"

namespace squeeze::eval {

enum class BenchKind { Prompt, Gen };

struct BenchTest {
  BenchKind kind = BenchKind::Prompt;
  int64_t n_tokens = 0;
  int64_t n_seq = 1;  // tg: sequences decoding at once, one token each per step (one batch)
  int64_t depth = 0;  // tokens already in each sequence's KV cache (llama-bench's -d)
  std::string name() const;  // "pp512", "tg128", "tg128x8" (8 sequences), "tg128@d8192"
};

struct BenchOptions {
  std::vector<int64_t> n_prompt = {512};  // one pp test per value; 0 = none
  std::vector<int64_t> n_gen = {128};     // one tg test per value; 0 = none
  std::vector<int64_t> parallel = {1};    // sequences per tg test: one test per n_gen x value
  std::vector<int64_t> depth = {0};       // context already filled: every test once per value
  int reps = 5;
  bool warmup = true;
  uint64_t seed = 1234;                   // the random token ids (speed does not depend on them)
};

// The tests to run, pp first, in the order given; zeros dropped. Throws UsageError for
// negative counts, parallel < 1, reps < 1, or no test at all.
std::vector<BenchTest> bench_tests(const BenchOptions& opt);
// KV cache capacity the tests need per sequence: their largest depth + token count.
int64_t bench_ctx_size(const std::vector<BenchTest>& tests);
// Sequences the tests need: their largest n_seq.
int64_t bench_n_seq(const std::vector<BenchTest>& tests);

// Counted work, from the model's shapes (see docs/BENCHMARKS.md).
// Bytes of weight matrices read per generated token: Model::weight_bytes() (the 7 matrices of
// every layer and the output head, in their stored formats; tied heads counted once), of a MoE
// layer's experts only n_expert_used of n_expert (what one token reads). Not counted: norms,
// the one embedding row, the KV cache.
double gen_bytes_per_token(const model::Model& m);
// FLOPs of one pp test of n tokens from an empty context: 2 per multiply-add of the layer
// matmuls for every token (MoE: the router and n_expert_used experts), of the output head for the last token only (as decode computes it),
// and of attention (q.k and p.v over the i+1 visible positions of token i). Not counted: norms,
// rope, softmax, SwiGLU, residual adds, activation quantization.
double prompt_flop(const model::Model& m, int64_t n_tokens);

struct BenchResult {
  BenchTest test;
  std::vector<double> samples_s;   // seconds per repetition
  std::vector<double> samples_ts;  // tokens/s per repetition (all sequences together)
  std::vector<double> samples_attn_s;  // of samples_s, the seconds in attention
  double avg_ts = 0;               // mean of samples_ts
  double stddev_ts = 0;            // sample standard deviation of samples_ts (0 for one rep)
  double median_ts = 0;
  std::optional<double> gb_per_s;     // tg: gen_bytes_per_token * avg_ts / n_seq / 1e9
  std::optional<double> gflop_per_s;  // pp: prompt_flop / n_tokens * avg_ts / 1e9
};

// Runs the warm-up (pp: the whole prompt; tg: one token, as llama-bench) and `reps` timed
// repetitions, each from an empty context, or with a depth from the test's first `depth`
// random tokens, decoded once (untimed) and kept by truncating back to them before each
// repetition. Only the test's decode calls are timed.
BenchResult run_bench(model::Context& ctx, const BenchTest& test, int reps, bool warmup,
                      uint64_t seed);

// The machine limits bench compares with, at the thread count used: read bandwidth for tg, and
// for pp the compute roof of the instructions the model's prefill kernels use (PrefillRoof,
// eval/machine.h), the FP32 FMA roof where the limits hold no other.
struct Roof {
  double read_gb_per_s = 0;
  double fma_gflop_per_s = 0;
  std::string prefill_name = "FP32 FMA";
  double prefill_gop_per_s = 0;  // 1e9 ops/s (a multiply-add counts 2)
  std::string source;  // the machine file it came from, or "--roof-gbs/--roof-gflops"
};

struct BenchReport {
  std::string model_path;
  size_t file_bytes = 0;
  size_t weight_bytes = 0;     // gen_bytes_per_token
  std::string weights_type;    // format holding most weight bytes ("q4_1")
  formats::DType weights_format = formats::DType::F32;  // the same as a type
  int threads = 0;
  std::string isa;             // kernels used: "avx2" or "scalar"
  int64_t n_batch = 0;
  int64_t n_ctx = 0;
  int reps = 0;
  std::optional<Roof> roof;
  std::vector<BenchResult> results;
};

// Fills everything but the results from the model and the run's settings.
BenchReport make_report(const model::Model& m, const std::string& path, int threads,
                        int64_t n_batch, int64_t n_ctx, int reps);
std::string report_json(const BenchReport& r);  // one JSON object; fields in docs/BENCHMARKS.md
std::string report_text(const BenchReport& r);  // a markdown table like llama-bench's

}  // namespace squeeze::eval
