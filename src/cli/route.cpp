// squeeze route: which per-domain mask `--domain auto` picks (compress/domains.h), for windows of
// a text: how often each domain is chosen, and the fraction that is the expected one.
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "compress/domains.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::cli {

int cmd_route(int argc, char** argv) {
  CLI::App app{"Route windows of a text to the domains of a model written by squeeze prune "
               "--domains, as --domain auto routes a prompt: the share of windows each domain "
               "gets.",
               "squeeze route"};
  std::string model_path, text_path, expect;
  int64_t tokens = 64, windows = 50;
  int threads = 0;
  app.add_option("-m,--model", model_path, "GGUF file with domain masks")->required();
  app.add_option("-f,--file", text_path, "text to take the windows from")->required();
  app.add_option("--tokens", tokens, "tokens per window, BOS included (default 64)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 16));
  app.add_option("--windows", windows, "windows, evenly spaced over the text (default 50)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--expect", expect, "the domain the windows belong to: report the accuracy");
  app.add_option("-t,--threads", threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    const std::string text = read_text(text_path);
    auto model = model::Model::load(resolve_model_path(model_path));
    const model::HParams& hp = model->hparams();
    const auto table = compress::read_domains(model->file(), hp.n_layer, hp.n_embd);
    if (!table) throw UsageError(model_path + " has no domain masks (write them with squeeze prune --domains)");
    const int64_t want = expect.empty() ? -1 : table->index(expect);
    tokenizer::Tokenizer tok(tokenizer::read_vocab(model->file()));
    const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/false);
    const tokenizer::Token bos = tok.vocab().bos;
    const int64_t body = bos >= 0 ? tokens - 1 : tokens;  // after BOS
    if (static_cast<int64_t>(ids.size()) < body) {
      throw UsageError(text_path + " has " + std::to_string(ids.size()) + " tokens, fewer than one window");
    }
    ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
    std::vector<int64_t> count(table->names.size(), 0);
    const int64_t span = static_cast<int64_t>(ids.size()) - body;
    for (int64_t w = 0; w < windows; ++w) {
      const int64_t start = windows > 1 ? span * w / (windows - 1) : 0;
      std::vector<int32_t> win;
      if (bos >= 0) win.push_back(bos);
      win.insert(win.end(), ids.begin() + start, ids.begin() + start + body);
      ++count[compress::route_domain(*table, compress::route_feature(*model, win, table->route_layer, pool))];
    }
    std::printf("%s: %lld windows of %lld tokens:", text_path.c_str(), static_cast<long long>(windows),
                static_cast<long long>(tokens));
    for (size_t d = 0; d < count.size(); ++d) {
      std::printf("%s %s %lld", d ? "," : "", table->names[d].c_str(), static_cast<long long>(count[d]));
    }
    if (want >= 0) std::printf("; %s: %.1f%%", expect.c_str(), 100.0 * count[want] / windows);
    std::printf("\n");
    return 0;
  });
}

}  // namespace squeeze::cli
