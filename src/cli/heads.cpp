// squeeze heads: per-layer, per-head scores of every head-pruning score kind on text
// (eval/head_stats.h), as a table, a PNG heat map, and optionally a ranking stored in a copy of
// the model for `--prefill-heads F --head-score static` (docs/POP.md).
#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "calib/calib.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "compress/output.h"
#include "core/atomic_file.h"
#include "eval/head_stats.h"
#include "model/model.h"
#include "sparsity/prefill_plan.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::cli {

namespace {

// One panel per score kind, side by side: a row per layer (layer 0 on top), a column per
// head, each panel's scores mapped from its lowest (dark blue) to its highest (yellow).
void write_heat_map(const eval::HeadStats& st, const std::string& path) {
  constexpr int kCell = 12, kGap = 8;
  const int panel_w = static_cast<int>(st.n_head) * kCell;
  const int width = static_cast<int>(eval::kHeadScores.size()) * (panel_w + kGap) - kGap;
  const int height = static_cast<int>(st.n_layer) * kCell;
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3, 255);
  for (size_t kind = 0; kind < eval::kHeadScores.size(); ++kind) {
    const auto& s = st.score[kind];
    const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
    const float range = *hi > *lo ? *hi - *lo : 1.0f;
    for (int64_t l = 0; l < st.n_layer; ++l) {
      for (int64_t h = 0; h < st.n_head; ++h) {
        const float x = (st.at(kind, l, h) - *lo) / range;
        const uint8_t c[3] = {static_cast<uint8_t>(40 + 215 * x), static_cast<uint8_t>(20 + 200 * x),
                              static_cast<uint8_t>(120 * (1 - x))};
        for (int y = 0; y < kCell; ++y) {
          for (int xx = 0; xx < kCell; ++xx) {
            const size_t px = (static_cast<size_t>(l * kCell + y) * width +
                               kind * (panel_w + kGap) + h * kCell + xx) * 3;
            std::copy_n(c, 3, rgb.data() + px);
          }
        }
      }
    }
  }
  AtomicFile out(path);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png != nullptr ? png_create_info_struct(png) : nullptr;
  if (png == nullptr || info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw Error("cannot encode the heat map " + path);
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, png_size_t n) {
        static_cast<AtomicFile*>(png_get_io_ptr(p))->write(data, n);
      },
      nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < height; ++y) png_write_row(png, rgb.data() + static_cast<size_t>(y) * width * 3);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  out.commit();
}

}  // namespace

int cmd_heads(int argc, char** argv) {
  CLI::App app{"Score every attention head of every layer on text with each head-pruning score "
               "(qk, entropy, vnorm, a2sf; docs/POP.md) and print them; optionally draw them as "
               "a PNG heat map and store one kind's ranking in a copy of the model for "
               "--prefill-heads F --head-score static.",
               "squeeze heads"};
  std::string in, text_path, png_path, out, store = "vnorm";
  eval::HeadStatsOptions o;
  int threads = 0;
  app.add_option("-m,--model", in, "GGUF model file (default: models/" +
                                       std::string(kDefaultModelFile) + ")");
  app.add_option("-f,--file", text_path, "text to score the heads on")->required();
  app.add_option("-c,--ctx", o.ctx, "tokens per chunk")->capture_default_str();
  app.add_option("--chunks", o.n_chunks, "chunks, from the text's start")->capture_default_str();
  app.add_option("--head-chunk", o.head_chunk, "positions per scoring (as --prefill-heads)")
      ->capture_default_str();
  app.add_option("--png", png_path, "write the heat map (a panel per score kind) to FILE");
  app.add_option("-o,--output", out, "write a copy of the model with the ranking of --store");
  app.add_option("--store", store, "the score kind -o stores")->capture_default_str();
  app.add_option("-t,--threads", threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    const ops::HeadScore stored = ops::parse_head_score(store);
    auto model = model::Model::load(resolve_model_path(in));
    if (!out.empty()) compress::check_output_path(model->file(), out);
    const tokenizer::Tokenizer tok(tokenizer::read_vocab(model->file()));
    const std::vector<int32_t> tokens =
        tok.encode(calib::read_calibration_text(text_path), /*add_special=*/true, /*parse_special=*/false);
    ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
    StopOnSignal stop_on_signal;
    o.interrupted = [] { return stop_requested().load(); };
    o.progress = [](int64_t done, int64_t total) {
      std::fprintf(stderr, "heads: chunk %lld/%lld\n", static_cast<long long>(done),
                   static_cast<long long>(total));
    };
    const eval::HeadStats st = eval::head_stats(*model, tokens, o, pool);
    for (size_t kind = 0; kind < eval::kHeadScores.size(); ++kind) {
      std::printf("%s (per layer: the heads' scores; higher: keep)\n",
                  std::string(ops::head_score_name(eval::kHeadScores[kind])).c_str());
      for (int64_t l = 0; l < st.n_layer; ++l) {
        std::printf("  layer %2lld:", static_cast<long long>(l));
        for (int64_t h = 0; h < st.n_head; ++h) std::printf(" %8.4f", st.at(kind, l, h));
        std::printf("\n");
      }
    }
    if (!png_path.empty()) {
      write_heat_map(st, png_path);
      std::fprintf(stderr, "heads: heat map -> %s\n", png_path.c_str());
    }
    if (!out.empty()) {
      sparsity::HeadRanking r;
      r.score = std::string(ops::head_score_name(stored));
      const auto at = std::find(eval::kHeadScores.begin(), eval::kHeadScores.end(), stored);
      r.scores = st.score[static_cast<size_t>(at - eval::kHeadScores.begin())];
      r.calib_file = text_path.substr(text_path.find_last_of('/') + 1);
      r.calib_chunks = o.n_chunks;
      r.calib_ctx = o.ctx;
      compress::write_with_metadata(model->file(), sparsity::HeadRanking::is_key,
                                    [&](gguf::Writer& w) { r.write(w); }, out, &stop_requested());
      std::fprintf(stderr, "heads: %s ranking -> %s\n", r.score.c_str(), out.c_str());
    }
    return 0;
  });
}

}  // namespace squeeze::cli
