// squeeze quantize: round-to-nearest conversion between llama.cpp's block types
// (compress/convert.h). Progress on stderr; Ctrl-C (SIGINT) or SIGTERM stops at the next
// tensor and leaves no output behind.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "compress/convert.h"
#include "core/timer.h"

namespace squeeze::cli {

namespace {

// The one piece of global state: a signal handler can reach nothing else.
std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the flag is set from a signal handler");

extern "C" void request_stop(int) { g_stop_requested.store(true); }

// Routes SIGINT and SIGTERM to the flag while alive, then restores the previous handlers.
class StopOnSignal {
 public:
  StopOnSignal() {
    g_stop_requested.store(false);
    struct sigaction sa {};
    sa.sa_handler = request_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopOnSignal() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

void print_progress(size_t i, size_t n, const compress::TensorPlan& p) {
  const gguf::TensorInfo& t = *p.src;
  const std::string from(formats::format_info(t.type).name);
  const std::string to(formats::format_info(p.type).name);
  std::string what = p.action == compress::TensorAction::Copy ? "copy " + from : from + " -> " + to;
  if (p.fallback) what += " (row length " + std::to_string(t.shape[0]) + " does not fit the blocks)";
  std::fprintf(stderr, "[%4zu/%4zu] %-36s %-18s %s\n", i + 1, n, t.name.c_str(),
               shape_text(t.shape).c_str(), what.c_str());
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  CLI::App app{"Convert a GGUF model between llama.cpp's block types by plain round-to-nearest, "
               "as llama-quantize does for one type: weight matrices are decoded and re-encoded "
               "with ggml's reference quantizer, norms and other 1-D tensors are copied. An "
               "existing OUT is replaced (only once the new file is complete).",
               "squeeze quantize"};
  std::string in, out, type_name;
  int threads = 0;
  app.add_option("-m,--model", in, "input GGUF file (default: models/" +
                                       std::string(kDefaultModelFile) + ")");
  app.add_option("-o,--output", out, "output GGUF file")->required();
  app.add_option("--type", type_name, "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0 or q5_1")->required();
  app.add_option("-t,--threads", threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  if (auto rc = parse(app, argc, argv)) return *rc;

  StopOnSignal stop_on_signal;
  return guarded([&] {
    const compress::TargetType& target = compress::parse_target_type(type_name);
    const gguf::File src = gguf::File::open(resolve_model_path(in));
    ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
    compress::ConvertOptions opts;
    opts.target = target.type;
    opts.cancel = &g_stop_requested;
    opts.on_tensor = print_progress;
    const Timer timer;
    compress::ConvertStats st;
    try {
      st = compress::convert_model(src, out, opts, pool);
    } catch (const compress::Interrupted& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 130;  // 128 + SIGINT, as a shell reports an interrupted command
    }
    std::fprintf(stderr,
                 "quantize: %zu tensors (%zu converted, %zu copied, %zu fell back to f16), "
                 "%.2f MiB -> %.2f MiB in %.2f s, %d threads -> %s\n",
                 st.n_tensors, st.n_converted, st.n_tensors - st.n_converted, st.n_fallback,
                 st.bytes_in / 1048576.0, st.bytes_out / 1048576.0, timer.seconds(), pool.size(),
                 out.c_str());
    return 0;
  });
}

}  // namespace squeeze::cli
