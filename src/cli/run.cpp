// squeeze run: generate text from a prompt, streamed to stdout; stats on stderr.
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "serve/generator.h"
#include "tokenizer/chat_template.h"

namespace squeeze::cli {

int cmd_run(int argc, char** argv) {
  CLI::App app{"Generate text from a prompt with a GGUF model.", "squeeze run"};
  ModelOptions mo;
  SamplingOptions so;
  std::string prompt;
  int64_t n_predict = 256;
  bool chat = false;
  std::string domain;
  mo.add_to(app);
  mo.evict.add_to(app);
  add_domain_option(app, domain, /*routes=*/true);
  app.add_option("-p,--prompt", prompt, "the prompt")->required();
  app.add_option("-n,--n-predict", n_predict, "tokens to generate; -1 = until end or context full")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 24));
  app.add_flag("--chat", chat, "wrap the prompt as a user message in the model's chat template");
  so.add_to(app);
  if (auto rc = parse(app, argc, argv)) return *rc;

  return guarded([&] {
    // The prompt's ids: special-token texts (<|im_start|>, ...) become their ids, as in llama-cli.
    const auto prompt_ids = [&](const model::Model& m, const tokenizer::Tokenizer& tok) {
      std::string text = prompt;
      if (chat) {
        auto tmpl = tokenizer::ChatTemplate::for_model(tok.vocab(), m.hparams().arch);
        text = tmpl.apply({{"user", prompt}}, /*add_generation_prompt=*/true);
      }
      return tok.encode(text, /*add_special=*/true, /*parse_special=*/true);
    };
    const serve::GeneratorOptions go = generator_options(mo, so);
    // --domain auto routes on the prompt's text, without the chat template around it.
    serve::Generator g(go, load_model(go.model_path, domain, go.threads, [&](const model::Model& m) {
                         return tokenizer::Tokenizer(tokenizer::read_vocab(m.file())).encode(prompt, true, true);
                       }));
    if (g.act_sparsity() != nullptr) print_act_sparsity(*g.act_sparsity());
    enable_prefill_pruning(g.model(), mo.prefill, g.context());
    const std::vector<int32_t> ids = prompt_ids(g.model(), g.tokenizer());
    if (ids.empty()) throw UsageError("the prompt tokenizes to nothing");
    if (n_predict >= 0 && static_cast<int64_t>(ids.size()) + n_predict > mo.n_ctx) {
      throw UsageError("prompt (" + std::to_string(ids.size()) + " tokens) plus -n " +
                       std::to_string(n_predict) + " exceeds the context of " +
                       std::to_string(mo.n_ctx) + " tokens (raise --ctx)");
    }
    if (static_cast<int64_t>(ids.size()) >= mo.n_ctx) {
      throw UsageError("prompt (" + std::to_string(ids.size()) +
                       " tokens) does not fit the context of " + std::to_string(mo.n_ctx) +
                       " tokens (raise --ctx)");
    }
    const serve::GenerationStats st = g.generate(ids, n_predict, [](std::string_view s) {
      std::cout << s << std::flush;
    });
    std::cout << std::endl;
    std::cerr << st.summary() << " | seed: " << g.options().sampling.seed
              << " | threads: " << g.pool().size() << "\n";
    if (g.act_sparsity() != nullptr) {
      std::cerr << "act-sparsity density: "
                << density_text(g.model(), *g.act_sparsity(), g.context().sparsity_counters())
                << "\n";
    }
    return 0;
  });
}

}  // namespace squeeze::cli
