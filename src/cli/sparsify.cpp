// squeeze sparsify: activation-sparsity thresholds (TEAL or CATS) calibrated on text, written
// into a copy of the model (compress/sparsify.h). Progress on stderr; Ctrl-C (SIGINT) or
// SIGTERM stops and leaves no output behind.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "calib/calib.h"
#include "compress/output.h"
#include "compress/sparsify.h"
#include "core/timer.h"
#include "model/model.h"

namespace squeeze::cli {

int cmd_sparsify(int argc, char** argv) {
  CLI::App app{"Calibrate activation-sparsity thresholds on text and write them into a copy of "
               "the model (weights unchanged). teal: zero small inputs of the q/k/v, o, gate/up "
               "and down projections; cats: zero neurons whose |SiLU(gate)| is small, skipping "
               "their up and down weights. Thresholds are stored for every level 0.00..0.99; "
               "the --sparsity levels are refined by a sparsified run and checked on held-back "
               "text, the first being the file's default. Use the "
               "file with `run|bench|perplexity --act-sparsity S`. An existing OUT is replaced "
               "(only once the new file is complete).",
               "squeeze sparsify"};
  std::string in, out, method = "teal", allocation = "uniform";
  std::string calib = "../shared/data/wikitext-2/valid.txt";
  compress::SparsifyOptions so;
  int threads = 0;
  app.add_option("-m,--model", in, "input GGUF file (default: models/" +
                                       std::string(kDefaultModelFile) + ")");
  app.add_option("-o,--output", out, "output GGUF file")->required();
  app.add_option("--method", method,
                 "teal, cats, or relu (SiLU replaced by ReLU, no thresholds: run it with "
                 "--act-sparsity 0)")
      ->capture_default_str();
  auto* sparsity_opt = app.add_option("--sparsity", so.levels,
                 "target sparsities (multiples of 0.01 in 0..0.99, comma-separated) to refine and "
                 "check on held-back text; the first is the file's default")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--refine-passes", so.refine_passes,
                 "sparsified re-calibration runs per --sparsity level (0: dense-model "
                 "quantiles only, as TEAL)")
      ->capture_default_str();
  app.add_option("--allocate", allocation,
                 "how a level is shared among the sites of a block: uniform (every site at the "
                 "level) or greedy (TEAL's block-wise greedy search on each block's output "
                 "error; teal only)")
      ->capture_default_str();
  auto* greedy_step_opt = app.add_option("--greedy-step", so.greedy_step,
                 "greedy allocation: block sparsity added per step (smaller: finer and slower)")
      ->capture_default_str();
  auto* greedy_samples_opt = app.add_option("--greedy-samples", so.greedy_samples,
                 "greedy allocation: calibration windows each block's error is measured on")
      ->capture_default_str();
  app.add_option("--calib", calib, "calibration text (the first 80% is used, the rest held back)")
      ->capture_default_str();
  app.add_option("--calib-samples", so.n_samples, "calibration windows")->capture_default_str();
  app.add_option("--calib-ctx", so.ctx, "tokens per window")->capture_default_str();
  app.add_option("--heldout-samples", so.heldout_samples, "held-back windows for the density check")
      ->capture_default_str();
  app.add_option("--seed", so.seed, "window sampling seed")->capture_default_str();
  app.add_option("-t,--threads", threads, "threads (default: all cores)");
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    so.method = sparsity::parse_method(method);
    if (so.method == sparsity::Method::Relu && sparsity_opt->count() == 0) so.levels = {0.0};
    if (allocation != "uniform" && allocation != "greedy") {
      throw UsageError("unknown --allocate '" + allocation + "' (uniform, greedy)");
    }
    so.greedy = allocation == "greedy";
    if (!so.greedy && (greedy_step_opt->count() > 0 || greedy_samples_opt->count() > 0)) {
      throw UsageError("--greedy-step and --greedy-samples need --allocate greedy");
    }
    if (threads < 0) throw UsageError("--threads must be positive");
    auto model = model::Model::load(resolve_model_path(in));
    if (model->hparams().n_expert > 0) {
      throw UsageError(model->file().path() + ": activation sparsity does not cover a MoE "
                       "model's experts yet");
    }
    compress::check_output_path(model->file(), out);
    const std::string text = calib::read_calibration_text(calib);
    tokenizer::Tokenizer tok(tokenizer::read_vocab(model->file()));
    ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());

    StopOnSignal stop_on_signal;
    so.cancel = &stop_requested();
    const bool tty = isatty(STDERR_FILENO) != 0;
    int64_t last_pct = -1;
    so.progress = [&](const std::string& stage, int64_t done, int64_t total) {
      const int64_t pct = 100 * done / total;
      if (tty) {
        std::fprintf(stderr, "\rsparsify: %s %lld/%lld", stage.c_str(),
                     static_cast<long long>(done), static_cast<long long>(total));
        if (done == total) std::fputc('\n', stderr);
      } else if (pct / 25 != last_pct / 25 || done == total) {
        std::fprintf(stderr, "sparsify: %s %lld/%lld\n", stage.c_str(),
                     static_cast<long long>(done), static_cast<long long>(total));
      }
      last_pct = done == total ? -1 : pct;
    };
    const Timer timer;
    try {
      const compress::SparsifyResult r = compress::calibrate_sparsity(*model, tok, text, so, pool);
      compress::write_sparsified(model->file(), r, so, calib, out, so.cancel);
      const sparsity::ThresholdTable& t = r.table;
      std::fprintf(stderr,
                   "sparsify: %s, %lld calibration tokens, thresholds for %zu levels x %lld "
                   "layers x %d sites in %.1f s -> %s\n",
                   std::string(sparsity::method_name(t.method)).c_str(),
                   static_cast<long long>(r.calib_tokens), t.levels.size(),
                   static_cast<long long>(t.n_layer), t.sites(), timer.seconds(), out.c_str());
      if (!r.allocation.empty()) {
        // Each asked level's greedy shares, averaged over the layers.
        for (const double lv : so.levels) {
          const size_t k = t.level_index(lv);
          std::fprintf(stderr, "sparsify: greedy allocation at %.2f (sparsity, mean over "
                       "layers):", t.levels[k]);
          for (int s = 0; s < t.sites(); ++s) {
            double sum = 0;
            for (int64_t il = 0; il < t.n_layer; ++il) {
              sum += r.allocation[(static_cast<size_t>(il) * t.sites() + s) * t.levels.size() + k];
            }
            std::fprintf(stderr, " %s %.2f", std::string(sparsity::site_name(t.method, s)).c_str(),
                         sum / static_cast<double>(t.n_layer));
          }
          std::fputc('\n', stderr);
        }
      }
      for (size_t i = 0; i < so.levels.size(); ++i) {
        const double level = std::round(so.levels[i] * 100) / 100;
        std::fprintf(stderr, "sparsify: density on %lld held-back tokens at sparsity %.2f "
                     "(target density %.2f):", static_cast<long long>(r.heldout_tokens), level,
                     1.0 - level);
        for (int s = 0; s < t.sites(); ++s) {
          std::fprintf(stderr, " %s %.3f", std::string(sparsity::site_name(t.method, s)).c_str(),
                       r.heldout_density[i][s]);
        }
        std::fprintf(stderr, "; weighted by weights %.3f", r.heldout_weighted_density[i]);
        if (i < r.heldout_head_density.size()) {
          std::fprintf(stderr, "; head_in %.3f (with --head-sparsity)", r.heldout_head_density[i]);
        }
        std::fputc('\n', stderr);
      }
      std::fprintf(stderr, "sparsify: density of the union over a batch of b held-back tokens "
                   "at sparsity %.2f (weighted by weights):", t.default_level);
      for (size_t i = 0; i < r.batch_sizes.size(); ++i) {
        std::fprintf(stderr, " b=%lld %.3f", static_cast<long long>(r.batch_sizes[i]),
                     r.batch_weighted_density[i]);
      }
      std::fputc('\n', stderr);
    } catch (const compress::Interrupted& e) {
      return interrupted_exit(e, tty);
    }
    return 0;
  });
}

}  // namespace squeeze::cli
