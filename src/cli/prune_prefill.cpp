// squeeze prune-prefill: the order in which POP skips layers in prefill, calibrated on text
// and written into a copy of the model (compress/prefill_calib.h). Progress on stderr; Ctrl-C
// (SIGINT) or SIGTERM stops and leaves no output behind.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "calib/calib.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "compress/output.h"
#include "compress/prefill_calib.h"
#include "core/timer.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::cli {

int cmd_prune_prefill(int argc, char** argv) {
  CLI::App app{"Score each layer by what skipping it in prefill costs (POP, docs/POP.md) and "
               "write the order of the layers, most skippable first, into a copy of the model "
               "(weights unchanged; llama.cpp still loads it). Use the file with "
               "`run|chat|perplexity|bench|serve --prefill-skip auto:R`. An existing OUT is "
               "replaced (only once the new file is complete).",
               "squeeze prune-prefill"};
  std::string in, out, calib = "../shared/data/wikitext-2/valid.txt";
  compress::PrefillCalibOptions o;
  int threads = 0;
  app.add_option("-m,--model", in, "input GGUF file (default: models/" +
                                       std::string(kDefaultModelFile) + ")");
  app.add_option("-o,--output", out, "output GGUF file")->required();
  app.add_option("--score", o.score,
                 "kld: the continuation's KL divergence from the dense model after a pruned "
                 "prefill (one layer at a time, then greedy); bi: ShortGPT's block influence, "
                 "1 - cos(layer input, output); last: the last layers first")
      ->capture_default_str();
  app.add_option("--calib", calib, "calibration text (chunks are taken from its start)")
      ->capture_default_str();
  app.add_option("--calib-chunks", o.n_chunks, "calibration chunks")->capture_default_str();
  app.add_option("--calib-ctx", o.ctx, "tokens per chunk; the first half is the prompt")
      ->capture_default_str();
  app.add_option("--candidates", o.candidates,
                 "kld: layers of lowest single score tried at each greedy step")
      ->capture_default_str();
  app.add_option("--max-fraction", o.max_fraction,
                 "kld: greedy steps up to this fraction of the layers (the rest of the order by "
                 "single score)")
      ->capture_default_str();
  app.add_option("-t,--threads", threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    auto model = model::Model::load(resolve_model_path(in));
    compress::check_output_path(model->file(), out);
    compress::check_options(*model, o);
    std::vector<int32_t> tokens;
    if (o.score != "last") {
      const tokenizer::Tokenizer tok(tokenizer::read_vocab(model->file()));
      tokens = tok.encode(calib::read_calibration_text(calib), /*add_special=*/true,
                          /*parse_special=*/false);
    }
    ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
    StopOnSignal stop_on_signal;
    o.cancel = &stop_requested();
    const bool tty = isatty(STDERR_FILENO) != 0;
    o.progress = [&](const std::string& stage, int64_t done, int64_t total) {
      if (!tty && done != total && done % 10 != 0) return;
      std::fprintf(stderr, "%sprune-prefill: %s %lld/%lld%s", tty ? "\r" : "", stage.c_str(),
                   static_cast<long long>(done), static_cast<long long>(total),
                   tty && done != total ? "" : "\n");
    };
    const Timer timer;
    try {
      compress::PrefillCalibResult r = compress::calibrate_prefill(*model, tokens, o, pool);
      r.plan.calib_file = o.score == "last" ? "" : calib.substr(calib.find_last_of('/') + 1);
      compress::write_prefill_plan(model->file(), r.plan, out, o.cancel);
      std::fprintf(stderr, "prune-prefill: %s, %lld evaluations in %.1f s -> %s\n",
                   o.score.c_str(), static_cast<long long>(r.evaluations), timer.seconds(),
                   out.c_str());
      std::printf("layer order (skipped first):");
      for (const int32_t il : r.plan.order) std::printf(" %d", il);
      std::printf("\nscore per layer (%s):", o.score.c_str());
      for (const float s : r.plan.scores) std::printf(" %.4g", s);
      std::printf("\n");
      for (size_t k = 0; k < r.greedy_kld.size(); ++k) {
        std::printf("greedy: %zu layers skipped (+%d), calibration KLD %.5f\n", k + 1,
                    r.plan.order[k], r.greedy_kld[k]);
      }
    } catch (const compress::Interrupted& e) {
      return interrupted_exit(e, tty);
    }
    return 0;
  });
}

}  // namespace squeeze::cli
