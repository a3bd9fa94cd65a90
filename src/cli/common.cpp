#include "cli/common.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "core/error.h"
#include "core/thread_pool.h"

namespace squeeze::cli {

namespace fs = std::filesystem;

std::string resolve_model_path(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("SQUEEZE_MODEL"); env != nullptr && *env != '\0') return env;
  std::vector<fs::path> candidates = {fs::current_path() / "models" / kDefaultModelFile};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); dir.has_relative_path(); dir = dir.parent_path()) {
      candidates.push_back(dir / "models" / kDefaultModelFile);
    }
  }
  for (const fs::path& p : candidates) {
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  throw UsageError(std::string("no model given (-m) and the default model ") + kDefaultModelFile +
                   " is not cached in models/; fetch it with scripts/fetch_model.sh");
}

void ModelOptions::add_to(CLI::App& app) {
  app.add_option("-m,--model", model, "GGUF model file (default: models/" +
                                          std::string(kDefaultModelFile) + ")");
  app.add_option("-c,--ctx", n_ctx, "context size in tokens (KV cache capacity)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("-t,--threads", threads, "threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
}

int ModelOptions::resolved_threads() const {
  return threads > 0 ? threads : ThreadPool::default_threads();
}

void SamplingOptions::add_to(CLI::App& app) {
  app.add_option("--temp", params.temp, "temperature; 0 = greedy")->capture_default_str();
  app.add_option("--top-k", params.top_k, "top-k; <= 0 disables")->capture_default_str();
  app.add_option("--top-p", params.top_p, "top-p (nucleus); 1 disables")->capture_default_str();
  app.add_option("--min-p", params.min_p, "min-p; 0 disables")->capture_default_str();
  app.add_option("--repeat-penalty", params.repeat_penalty, "repetition penalty; 1 disables")
      ->capture_default_str();
  app.add_option("--repeat-last-n", params.repeat_last_n, "tokens the penalty looks back over")
      ->capture_default_str();
  app.add_option("--seed", seed, "random seed (default: random, printed at the end)");
}

sample::SamplerParams SamplingOptions::resolved() const {
  sample::SamplerParams p = params;
  if (seed) {
    p.seed = *seed;
  } else {
    p.seed = static_cast<uint64_t>(
                 std::chrono::steady_clock::now().time_since_epoch().count()) ^
             (static_cast<uint64_t>(getpid()) << 32);
  }
  sample::validate(p);
  return p;
}

std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << " (run with --help for usage)\n";
    return 2;
  }
  return std::nullopt;
}

int guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace squeeze::cli
