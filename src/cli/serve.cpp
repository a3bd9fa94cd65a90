// squeeze serve: the OpenAI-compatible HTTP server (serve/http_server.h) on the serving engine
// (serve/engine.h). SIGINT / SIGTERM: new requests get 503, the ones taken finish, exit 0; a
// second signal cancels those.
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "serve/engine.h"
#include "serve/http_server.h"
#include "tokenizer/chat_template.h"

namespace squeeze::cli {

int cmd_serve(int argc, char** argv) {
  CLI::App app{"Serve a GGUF model over an OpenAI-compatible HTTP API.", "squeeze serve"};
  ModelOptions mo;
  mo.n_ctx = 4096;
  serve::EngineConfig ec;
  serve::HttpOptions ho;
  std::optional<uint64_t> seed;
  std::string domain;
  mo.add_to(app);
  add_domain_option(app, domain, /*routes=*/false);
  app.add_option("--host", ho.host, "address to listen on")->capture_default_str();
  app.add_option("--port", ho.port, "port (0: any free one, printed)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--api-key", ho.api_key, "clients must send 'Authorization: Bearer KEY'");
  app.add_option("--parallel", ec.parallel, "sequences decoded together at most")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{256}));
  auto* kv_tokens_opt =
      app.add_option("--kv-tokens", ec.kv_tokens,
                     "KV cache capacity in tokens, shared by the sequences (default: --ctx per "
                     "--parallel sequence)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 26));
  double kv_mib = 0;
  app.add_option("--kv-mib", kv_mib,
                 "KV cache capacity as memory: the tokens whose storage (codes, and the blocks "
                 "a quantized cache holds in half) fits in this many MiB")
      ->check(CLI::Range(0.001, 1048576.0))
      ->excludes(kv_tokens_opt);
  app.add_option("--batch-tokens", ec.batch_tokens, "tokens per forward step (decodes + prompt chunks)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--queue", ec.max_queue, "requests waiting at most (then 429)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_flag("--no-prefix-cache{false}", ec.prefix_cache,
               "compute every prompt in full (no reuse of cached KV blocks)");
  const std::map<std::string, serve::SplitMode> split_modes{
      {"auto", serve::SplitMode::Auto}, {"never", serve::SplitMode::Never},
      {"always", serve::SplitMode::Always}};
  auto* split_opt =
      app.add_option("--act-sparsity-split", ec.split,
                     "with --act-sparsity, steps of 2-8 decodes run as one-token passes (which "
                     "skip weights) or as one batch: auto (whichever is measured faster), never, always")
          ->transform(CLI::CheckedTransformer(split_modes, CLI::ignore_case));
  app.add_option("--seed", seed, "seed of requests without one (default: random)");
  if (auto rc = parse(app, argc, argv)) return *rc;
  const bool split_given = split_opt->count() > 0;

  return guarded([&] {
    const std::string path = resolve_model_path(mo.model);
    const auto model = load_model(path, domain, mo.resolved_threads());
    const tokenizer::Tokenizer tok(tokenizer::read_vocab(model->file()));
    std::optional<tokenizer::ChatTemplate> tmpl;
    const std::string& arch = model->hparams().arch;
    if (!tok.vocab().chat_template.empty() || arch.starts_with("gemma")) {
      try {
        tmpl = tokenizer::ChatTemplate::for_model(tok.vocab(), arch);
      } catch (const Error& e) {  // serve completions; chat requests get a 400 saying why
        std::cerr << "squeeze serve: warning: " << e.what() << "; /v1/chat/completions is off\n";
      }
    }
    ThreadPool pool(mo.resolved_threads());
    ec.n_ctx = mo.n_ctx;
    ec.kv = mo.kv.resolved();
    if (kv_mib > 0) {
      const model::HParams& hp = model->hparams();
      ec.kv_tokens = kv::tokens_for_memory(ec.kv, hp.n_layer, hp.n_head_kv * hp.head_dim,
                                           static_cast<size_t>(kv_mib * 1048576.0), ec.parallel,
                                           ec.batch_tokens);
      if (ec.kv_tokens < mo.n_ctx) {
        throw UsageError("--kv-mib " + std::to_string(kv_mib) + " holds " + std::to_string(ec.kv_tokens) +
                         " tokens, less than one sequence of --ctx " + std::to_string(mo.n_ctx));
      }
    }
    if (ec.kv_tokens == 0) ec.kv_tokens = mo.n_ctx * ec.parallel;
    serve::Engine engine(*model, tok, pool, ec);
    const auto sparsity = enable_act_sparsity(*model, mo.act_sparsity, engine.context(), pool);
    enable_prefill_pruning(*model, mo.prefill, engine.context());
    if (!sparsity && split_given) throw UsageError("--act-sparsity-split needs --act-sparsity");
    ho.model_id = std::filesystem::path(path).filename().string();
    ho.seed = seed ? *seed : std::random_device{}();
    serve::HttpServer server(engine, tok, tmpl ? &*tmpl : nullptr, ho);
    const int port = server.bind();
    const auto& kv = engine.context().kv();
    std::cerr << "squeeze serve: " << ho.model_id << " on http://" << ho.host << ":" << port
              << " | parallel " << ec.parallel << " | context " << ec.n_ctx << " | KV cache "
              << kv.capacity() << " tokens, " << kv::describe(kv.options()) << ", "
              << kv.bytes() / (1 << 20) << " MiB | batch "
              << ec.batch_tokens << " tokens | prefix cache " << (ec.prefix_cache ? "on" : "off")
              << " | threads " << pool.size() << std::endl;
    std::optional<StopOnSignal> signals;
    signals.emplace();
    std::signal(SIGPIPE, SIG_IGN);  // a client that went away is an error on its socket, not a kill
    std::atomic<bool> engine_done{false};
    std::thread engine_thread([&] {
      engine.run();
      engine_done = true;
    });
    std::thread http_thread([&] { server.listen(); });
    while (!stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::cerr << "squeeze serve: stopping: finishing the requests taken (a second signal cancels them)"
              << std::endl;
    server.refuse_new();
    engine.stop();
    signals.emplace();  // listens again, the flag cleared
    while (!engine_done) {
      if (stop_requested()) engine.stop(/*cancel=*/true);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    engine_thread.join();
    server.stop();  // after the last streams were written
    http_thread.join();
    return 0;
  });
}

}  // namespace squeeze::cli
