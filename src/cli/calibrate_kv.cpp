// squeeze calibrate-kv: a non-uniform codebook for the quantized KV cache (KVQuant's nuq), fitted
// on calibration text and stored in a copy of the model for --kv-codebook (docs/KVCACHE.md).
#include <cstdio>

#include "calib/calib.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "compress/kv_codebook.h"
#include "compress/output.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::cli {

int cmd_calibrate_kv(int argc, char** argv) {
  CLI::App app{"Fit the levels q4 or q2 KV codes stand for (per layer, for keys and for values: "
               "weighted k-means of what the cache's groups hold on calibration text) and store "
               "them in a copy of the model, for --kv-codebook.",
               "squeeze calibrate-kv"};
  std::string in, text_path, out;
  int64_t samples = 16, ctx = 512;
  uint64_t seed = 1;
  int threads = 0;
  KvCacheOptions kv;
  app.add_option("-m,--model", in, "GGUF model file (default: models/" +
                                       std::string(kDefaultModelFile) + ")");
  app.add_option("-f,--calib", text_path, "calibration text (never the evaluation text)")->required();
  app.add_option("--samples", samples, "windows of the text")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--ctx", ctx, "tokens per window")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  app.add_option("--seed", seed, "where the windows start")->capture_default_str();
  app.add_option("-o,--output", out, "the copy of the model with the codebook")->required();
  app.add_option("-t,--threads", threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  kv.add_to(app);
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    for (const char* name : {"--kv-recent", "--kv-codebook"}) {
      if (app.count(name) > 0) throw UsageError(std::string(name) + " does not apply: calibrate-kv quantizes every block");
    }
    const kv::KvOptions o = kv.resolved();
    auto model = model::Model::load(resolve_model_path(in));
    compress::check_output_path(model->file(), out);
    kv::check_kv_options(o, model->hparams().n_head_kv * model->hparams().head_dim);
    const tokenizer::Tokenizer tok(tokenizer::read_vocab(model->file()));
    const calib::CalibSamples cs =
        calib::sample_calibration_text(calib::read_calibration_text(text_path), tok, samples, ctx, seed);
    ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
    StopOnSignal stop_on_signal;
    compress::KvCodebookFit r = compress::fit_kv_codebook(
        *model, cs.samples, o, pool,
        [](int64_t done, int64_t total) {
          std::fprintf(stderr, "calibrate-kv: sample %lld/%lld\n", static_cast<long long>(done),
                       static_cast<long long>(total));
        },
        &stop_requested());
    r.codebook.calib = text_path.substr(text_path.find_last_of('/') + 1) + ", " + std::to_string(samples) +
                       " x " + std::to_string(ctx) + " tokens, seed " + std::to_string(seed);
    std::printf("codebook %s: %lld values observed; squared error per value (code units) %.5f uniform, "
                "%.5f fitted (%.1f%% less)\n",
                r.codebook.options.c_str(), static_cast<long long>(r.observed), r.uniform_error,
                r.fitted_error, r.uniform_error > 0 ? 100 * (1 - r.fitted_error / r.uniform_error) : 0.0);
    for (int64_t il = 0; il < r.codebook.n_layer; ++il) {
      for (int k = 0; k < 2; ++k) {
        std::printf("  layer %2lld %s:", static_cast<long long>(il), k == 0 ? "K" : "V");
        for (int c = 0; c < r.codebook.n_levels(); ++c) std::printf(" %.3f", r.codebook.at(il, k)[c]);
        std::printf("\n");
      }
    }
    compress::write_kv_codebook(model->file(), r.codebook, out, &stop_requested());
    std::fprintf(stderr, "calibrate-kv: codebook -> %s\n", out.c_str());
    return 0;
  });
}

}  // namespace squeeze::cli
