// Pieces shared by the subcommands: model lookup, common options, errors, signals.
#pragma once

#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compress/quantize_model.h"
#include "core/thread_pool.h"
#include "model/act_sparsity.h"
#include "model/context.h"
#include "sample/sampler.h"
#include "serve/generator.h"

namespace squeeze::cli {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// -m MODEL if given; else $SQUEEZE_MODEL; else the default model cached in models/ (next to
// the working directory or the binary). Throws UsageError saying how to fetch it if absent.
// The first regular file of `first`, then `relative` under each folder above the binary
// (/proc/self/exe), innermost first; nullopt when none exists.
std::optional<std::string> find_default_file(const std::filesystem::path& first,
                                             const std::filesystem::path& relative);
std::string resolve_model_path(const std::string& given);

// --act-sparsity and --head-sparsity: levels of the file's thresholds.
struct ActSparsityOptions {
  std::optional<double> level;  // the blocks' (TEAL's sites, CATS's, ReLU's)
  std::optional<double> head;   // the output head's (TEAL tables only)
};

// Prefill-only pruning (docs/POP.md): --prefill-skip (sparsity/prefill_plan.h), and head
// pruning --prefill-heads F with --head-chunk and --head-score (model::HeadPruning).
struct PrefillOptions {
  std::string skip;
  std::optional<double> heads;
  int64_t head_chunk = 256;
  std::string head_score = "vnorm";
  bool head_groups = false;
  bool any() const { return !skip.empty() || heads.has_value(); }
};

// The KV cache's storage (kv/kv_quant.h): --kv-type, --kv-k-axis, --kv-group, --kv-recent,
// --kv-sinks, --kv-outliers, --kv-k-prerope, --kv-codebook.
struct KvCacheOptions {
  std::string type = "f16";
  std::string k_axis = "channel";
  kv::KvOptions parsed;  // group, recent, sinks, outliers, k_prerope are read into it directly
  std::vector<CLI::Option*> quant_only;  // options that mean nothing for an f16 cache
  void add_to(CLI::App& app);
  // The options; UsageError for a bad name, or a quantizer option given with --kv-type f16.
  kv::KvOptions resolved() const;
};

// Token eviction (kv/evict.h): --kv-evict POLICY with --kv-budget N|F (tokens, or a fraction
// of --ctx) and the policy's parameters --kv-evict-sinks, --kv-evict-recent, --kv-evict-window,
// --kv-evict-pool, --kv-evict-alpha. Added by the commands that run one Context per sequence
// (run, chat, perplexity, passkey).
struct EvictCliOptions {
  std::string policy = "none";
  std::string budget;
  kv::EvictOptions parsed;  // sinks, recent, window, pool and alpha are read into it directly
  CLI::Option* budget_opt = nullptr;
  std::vector<std::pair<CLI::Option*, std::vector<kv::EvictPolicy>>> policy_only;
  void add_to(CLI::App& app);
  // The options for a context of n_ctx tokens; UsageError for a bad policy or budget, a budget
  // without a policy (or the reverse), or a parameter its policy does not read.
  kv::EvictOptions resolved(int64_t n_ctx) const;
};

// Options every model-running command takes.
struct ModelOptions {
  std::string model;
  int64_t n_ctx = 2048;
  int threads = 0;  // 0: all hardware threads
  ActSparsityOptions act_sparsity;
  PrefillOptions prefill;
  KvCacheOptions kv;
  EvictCliOptions evict;  // registered only by the commands that read it
  void add_to(CLI::App& app);
  int resolved_threads() const;
};

// --calib, --calib-samples, --calib-ctx and --seed of a calibrating compress command (quantize,
// prune); `who` names the methods that read them in the help ("GPTQ", "wanda and sparsegpt").
struct CalibOptions {
  CLI::Option* calib;
  CLI::Option* samples;
  CLI::Option* ctx;
  CLI::Option* seed;
};
CalibOptions add_calibration_options(CLI::App& app, compress::QuantizeOptions& qo,
                                     const std::string& who);

// The text as llama.cpp's -f reads it: the whole file, one trailing newline dropped.
// UsageError when it cannot be opened.
std::string read_text(const std::string& path);

// --domain NAME|auto (per-domain FFN masks, compress/domains.h) of run, perplexity and bench.
void add_domain_option(CLI::App& app, std::string& domain, bool routes);
// The model at path, or, with `domain` set, the model restricted to that domain's neurons
// ("auto": the domain nearest to route_tokens(dense model), which must then be given), with a
// line on stderr naming it. UsageError for a file without masks or an unknown name.
std::unique_ptr<model::Model> load_model(
    const std::string& path, const std::string& domain, int threads,
    const std::function<std::vector<int32_t>(const model::Model&)>& route_tokens = nullptr);

// Adds --prefill-skip, --prefill-heads, --head-chunk and --head-score to a command.
void add_prefill_options(CLI::App& app, PrefillOptions& o);
// Sets ctx's prefill skip set and head pruning from the options (nothing when not given), with
// a line on stderr for each. Throws UsageError for a bad set or score.
void enable_prefill_pruning(const model::Model& m, const PrefillOptions& o, model::Context& ctx);

// Adds --act-sparsity and --head-sparsity to a command.
void add_act_sparsity_option(CLI::App& app, ActSparsityOptions& o);

// The activation-sparsity policy of `o` (nullptr when no level is given) for ctx, with one line
// on stderr saying what runs. Throws UsageError when the file has no thresholds or no such
// level, or --head-sparsity comes without --act-sparsity.
std::unique_ptr<model::ActSparsity> enable_act_sparsity(const model::Model& m,
                                                        const ActSparsityOptions& o,
                                                        model::Context& ctx, ThreadPool& pool);
// That line: "act-sparsity: teal at level 0.50, column layouts 63.3 MiB".
void print_act_sparsity(const model::ActSparsity& policy);

// "attn_in 0.501 attn_out 0.498 ... (weighted by weights 0.500); block weights read 0.512": the
// density each site reached and the fraction of the blocks' weight bytes the products read.
std::string density_text(const model::Model& m, const model::ActSparsity& policy,
                         const model::SparsityCounters& c);

// "act-sparsity teal 0.50: density " + density_text(...): the last line of an evaluation.
std::string act_sparsity_summary(const model::Model& m, const model::ActSparsity& policy,
                                 const model::SparsityCounters& c);

struct SamplingOptions {
  sample::SamplerParams params;
  std::optional<uint64_t> seed;  // random when not given (printed with the stats)
  void add_to(CLI::App& app);
  sample::SamplerParams resolved() const;
};

// A generator's set-up from a command's options (the model path resolved, the seed drawn).
serve::GeneratorOptions generator_options(const ModelOptions& mo, const SamplingOptions& so);

// Parses argv with the app; returns an exit code when parsing ended the command (--help or
// an error, printed), or nullopt to go on.
std::optional<int> parse(CLI::App& app, int argc, char** argv);

// "12.3s" under a minute, else "4m05s" (progress lines' ETA).
std::string duration_text(double seconds);

// A long operation stopped by a signal: ends a progress line on a terminal, prints
// `error: WHAT` and returns exit code 130.
int interrupted_exit(const std::exception& e, bool tty);

// The log of a compress command on stderr: lasting lines, and transient ones (progress) that
// overwrite each other in place and are shown only on a terminal.
class LogLines {
 public:
  LogLines();
  void operator()(const std::string& line, bool transient);
  // Whether a transient line is on screen (an error message must start a new line).
  bool transient_shown() const { return transient_shown_; }

 private:
  bool tty_ = false;
  bool transient_shown_ = false;
};

// compress::quantize_model (quantize --method, prune) with a LogLines log and Ctrl-C as the
// cancel flag (a StopOnSignal must be alive): its stats, or nullopt when it was interrupted
// (the message printed; the command exits 130).
std::optional<compress::QuantizeStats> quantize_with_progress(const std::string& model_path,
                                                              const std::string& out_path,
                                                              compress::QuantizeOptions& qo,
                                                              ThreadPool& pool);

// Runs body and turns squeeze errors into one `error: ...` line and exit code 1.
int guarded(const std::function<int()>& body);

// Set by SIGINT / SIGTERM while a StopOnSignal is alive: long operations poll it and stop,
// leaving no partial output.
const std::atomic<bool>& stop_requested();

// Routes SIGINT and SIGTERM to stop_requested() while alive (clearing it first), then restores
// the previous handlers.
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace squeeze::cli
