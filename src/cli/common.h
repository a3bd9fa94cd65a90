// Pieces shared by the subcommands: model lookup, common options, generation loop.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sample/sampler.h"

namespace squeeze::cli {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// -m MODEL if given; else $SQUEEZE_MODEL; else the default model cached in models/ (next to
// the working directory or the binary). Throws UsageError saying how to fetch it if absent.
std::string resolve_model_path(const std::string& given);

// Options every model-running command takes.
struct ModelOptions {
  std::string model;
  int64_t n_ctx = 2048;
  int threads = 0;  // 0: all hardware threads
  void add_to(CLI::App& app);
  int resolved_threads() const;
};

struct SamplingOptions {
  sample::SamplerParams params;
  std::optional<uint64_t> seed;  // random when not given (printed with the stats)
  void add_to(CLI::App& app);
  sample::SamplerParams resolved() const;
};

// Parses argv with the app; returns an exit code when parsing ended the command (--help or
// an error, printed), or nullopt to go on.
std::optional<int> parse(CLI::App& app, int argc, char** argv);

// Runs body and turns squeeze errors into one `error: ...` line and exit code 1.
int guarded(const std::function<int()>& body);

}  // namespace squeeze::cli
