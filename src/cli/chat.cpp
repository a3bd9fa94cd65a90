// squeeze chat: an interactive chat loop with the model's chat template and the history.
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "serve/generator.h"
#include "tokenizer/chat_template.h"

namespace squeeze::cli {

int cmd_chat(int argc, char** argv) {
  CLI::App app{"Chat with a model in the terminal. Type a message and press Enter; "
               "/reset clears the history, /quit (or end of input) leaves.",
               "squeeze chat"};
  ModelOptions mo;
  SamplingOptions so;
  std::string system, domain;
  int64_t n_predict = -1;
  mo.add_to(app);
  mo.evict.add_to(app);
  add_domain_option(app, domain, /*routes=*/true);
  app.add_option("-s,--system", system, "system message (default: the template's own)");
  app.add_option("-n,--n-predict", n_predict, "max tokens per reply; -1 = until the end")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 24));
  so.add_to(app);
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    const serve::GeneratorOptions go = generator_options(mo, so);
    // With --domain auto the model is chosen by the first message, so the generator (and the
    // domain's model) is made once that message is known; the dense file's vocabulary and
    // template render it (a domain's model has the same).
    std::unique_ptr<serve::Generator> g;
    const auto start = [&](const std::vector<int32_t>& first) {
      g = std::make_unique<serve::Generator>(
          go, load_model(go.model_path, domain, go.threads, [&](const model::Model&) { return first; }));
      if (g->act_sparsity() != nullptr) print_act_sparsity(*g->act_sparsity());
      enable_prefill_pruning(g->model(), mo.prefill, g->context());
    };
    const bool routed = domain == "auto";
    const std::unique_ptr<model::Model> dense = routed ? model::Model::load(go.model_path) : nullptr;
    if (!routed) start({});
    const model::Model& m = routed ? *dense : g->model();
    std::optional<tokenizer::Tokenizer> dense_tok;  // routed: until the generator has its own
    if (routed) dense_tok.emplace(tokenizer::read_vocab(m.file()));
    const tokenizer::Tokenizer& tok = routed ? *dense_tok : g->tokenizer();
    const auto tmpl = tokenizer::ChatTemplate::for_model(tok.vocab(), m.hparams().arch);

    std::vector<tokenizer::ChatMessage> history;
    if (!system.empty()) history.push_back({"system", system});
    std::vector<int32_t> cached;  // tokens whose K/V are in the generator's context, in order
    std::cerr << "squeeze chat: " << go.model_path << " (" << tmpl.origin()
              << " chat template, ctx " << mo.n_ctx << "). /reset clears, /quit leaves.\n";
    std::string line;
    for (;;) {
      std::cout << "> " << std::flush;
      if (!std::getline(std::cin, line) || line == "/quit" || line == "/exit") break;
      if (line.empty()) continue;
      if (line == "/reset") {
        history.resize(system.empty() ? 0 : 1);
        continue;
      }
      history.push_back({"user", line});
      // Render the whole conversation and reuse the cached prefix it shares with the cache.
      const std::vector<int32_t> ids =
          tok.encode(tmpl.apply(history, /*add_generation_prompt=*/true), true, true);
      if (static_cast<int64_t>(ids.size()) >= mo.n_ctx) {
        std::cerr << "error: the conversation (" << ids.size() << " tokens) fills the context of "
                  << mo.n_ctx << " tokens; /reset to start over or raise --ctx\n";
        history.pop_back();
        continue;
      }
      // --domain auto: the first message's text (not the template around it) picks the domain;
      // a message of one token routes with the template (the feature leaves the first out).
      if (!g) {
        const std::vector<int32_t> text = tok.encode(line, /*add_special=*/true, /*parse_special=*/true);
        start(text.size() >= 2 ? text : ids);
      }
      model::Context& ctx = g->context();
      size_t common = 0;
      while (common < cached.size() && common + 1 < ids.size() && cached[common] == ids[common]) {
        ++common;
      }
      ctx.truncate(static_cast<int64_t>(common));
      cached.resize(common);
      g->sampler().reset();
      std::vector<int32_t> reply;
      const std::span<const int32_t> fresh(ids.data() + common, ids.size() - common);
      const serve::GenerationStats st = g->generate(
          fresh, n_predict, [](std::string_view s) { std::cout << s << std::flush; }, &reply);
      std::cout << "\n";
      std::cerr << "[" << st.summary() << "]\n";
      cached.insert(cached.end(), fresh.begin(), fresh.end());
      cached.insert(cached.end(), reply.begin(), reply.end());
      cached.resize(static_cast<size_t>(ctx.n_past()));
      history.push_back({"assistant", tok.decode(reply)});
    }
    return 0;
  });
}

}  // namespace squeeze::cli
