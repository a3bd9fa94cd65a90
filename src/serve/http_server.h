// The OpenAI-compatible HTTP front of the engine (cpp-httplib): POST /v1/completions and
// /v1/chat/completions (whole or streamed as server-sent events), GET /v1/models, /health and
// /metrics (Prometheus text). Bad requests get a 4xx with OpenAI's error body; a client that
// goes away mid-stream has its request cancelled.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "serve/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;           // empty: no key needed
  std::string model_id;          // the name /v1/models lists and requests may give
  int64_t max_body_bytes = 8 << 20;
  int threads = 64;              // connections served at once (streams hold one each)
  uint64_t seed = 0;             // requests without a seed draw from seed, seed + 1, ...
};

class HttpServer {
 public:
  // The engine, tokenizer and template must outlive the server; the engine runs on its own
  // thread (Engine::run), started by the caller.
  HttpServer(Engine& engine, const tokenizer::Tokenizer& tok,
             const tokenizer::ChatTemplate* chat_template, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0: any free port). Throws Error when it cannot.
  int bind();
  // Serves until stop(); returns then.
  void listen();
  // New requests get 503 from now on (a draining server).
  void refuse_new();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace squeeze::serve
