#include "serve/http_server.h"

#include <httplib.h>

#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>

#include "core/error.h"
#include "serve/openai.h"

namespace squeeze::serve {

namespace {

std::optional<FinishReason> finish_reason(const std::optional<Finish>& f) {
  if (!f || *f == Finish::Cancelled) return std::nullopt;
  return *f == Finish::Length ? FinishReason::Length : FinishReason::Stop;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

// A request, checked and tokenized, as the engine takes it.
struct Prepared {
  CompletionRequest req;
  std::vector<int32_t> prompt;
  GenParams params;
};

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  const tokenizer::Tokenizer& tok;
  const tokenizer::ChatTemplate* chat_template;
  HttpOptions o;
  httplib::Server svr;
  std::atomic<bool> refusing{false};
  std::atomic<uint64_t> next_id{0};
  std::mutex mu;
  std::map<int, int64_t> by_status;  // responses by HTTP status

  Impl(Engine& e, const tokenizer::Tokenizer& t, const tokenizer::ChatTemplate* ct, HttpOptions opt)
      : engine(e), tok(t), chat_template(ct), o(std::move(opt)) {
    const int threads = o.threads;
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr.set_payload_max_length(static_cast<size_t>(o.max_body_bytes));
    svr.set_logger([this](const httplib::Request&, const httplib::Response& res) {
      std::lock_guard lock(mu);
      ++by_status[res.status];
    });
    // Statuses httplib answers by itself (413, 404 of unknown paths, 400 of broken HTTP) get
    // OpenAI's error body too.
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string msg = "request failed with HTTP status " + std::to_string(res.status);
      if (res.status == 413) msg = "the request body is larger than this server accepts";
      if (res.status == 404) msg = "no such endpoint: " + req.method + " " + req.path;
      send_error(res, ApiError(res.status, msg));
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string msg = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        msg = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, msg));
    });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(refusing ? R"({"status":"stopping"})" : R"({"status":"ok"})", "application/json");
      if (refusing) res.status = 503;
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      res.set_content(models_list(o.model_id, std::time(nullptr)), "application/json");
    });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, RequestKind::Completion);
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      complete(req, res, RequestKind::Chat);
    });
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (o.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + o.api_key) return true;
    send_error(res, ApiError(401, "a valid API key is needed: 'Authorization: Bearer KEY'", "",
                             "invalid_api_key"));
    return false;
  }

  std::string metrics_text() {
    std::string out = prometheus_text(engine.metrics());
    out += "# HELP squeeze:requests_total HTTP responses by status.\n";
    out += "# TYPE squeeze:requests_total counter\n";
    std::lock_guard lock(mu);
    for (const auto& [status, n] : by_status) {
      out += "squeeze:requests_total{status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
    }
    return out;
  }

  Prepared prepare(const httplib::Request& http, RequestKind kind) {
    Prepared p;
    p.req = parse_request(http.body, kind);
    const CompletionRequest& r = p.req;
    if (!r.model.empty() && r.model != o.model_id) {
      throw ApiError(404, "the model '" + r.model + "' does not exist; this server runs '" +
                              o.model_id + "'", "model", "model_not_found");
    }
    if (kind == RequestKind::Chat) {
      if (chat_template == nullptr) throw ApiError(400, "this model has no chat template", "messages");
      std::vector<tokenizer::ChatMessage> msgs;
      for (const ChatMessage& m : r.messages) msgs.push_back({m.role, m.content});
      std::string text;
      try {
        text = chat_template->apply(msgs, /*add_generation_prompt=*/true);
      } catch (const Error& e) {  // the template refused the messages (raise_exception)
        throw ApiError(400, e.what(), "messages");
      }
      p.prompt = tok.encode(text, true, true);
    } else if (!r.prompt_tokens.empty()) {
      p.prompt = r.prompt_tokens;
      for (const int32_t t : p.prompt) {
        if (t >= tok.n_vocab()) {
          throw ApiError(400, "prompt token " + std::to_string(t) + " is outside the vocabulary of " +
                                  std::to_string(tok.n_vocab()), "prompt");
        }
      }
    } else {
      p.prompt = tok.encode(r.prompt, true, true);
    }
    const auto n_prompt = static_cast<int64_t>(p.prompt.size());
    const int64_t n_ctx = engine.config().n_ctx;
    if (n_prompt == 0) throw ApiError(400, "the prompt is empty", kind == RequestKind::Chat ? "messages" : "prompt");
    const int64_t max_tokens = r.max_tokens ? *r.max_tokens : n_ctx - n_prompt;
    if (n_prompt + max_tokens > n_ctx || max_tokens < 1) {
      throw ApiError(400, "this model's context holds " + std::to_string(n_ctx) +
                              " tokens; the request asks for " + std::to_string(n_prompt + max_tokens) +
                              " (" + std::to_string(n_prompt) + " of prompt, " +
                              std::to_string(max_tokens) + " to generate)",
                     r.max_tokens ? "max_tokens" : "messages", "context_length_exceeded");
    }
    if (r.n > engine.config().parallel) {
      throw ApiError(400, "n = " + std::to_string(r.n) + "; this server runs at most " +
                              std::to_string(engine.config().parallel) + " sequences at once", "n");
    }
    p.params.sampling = sampler_params(r, o.seed + next_id.load(), 0);
    p.params.max_tokens = max_tokens;
    p.params.stop = r.stop;
    p.params.n = r.n;
    p.params.logprobs = r.logprobs ? r.top_logprobs : -1;
    return p;
  }

  std::vector<TokenLogprob> logprobs(const std::vector<TokenInfo>& tokens) const {
    std::vector<TokenLogprob> out;
    for (const TokenInfo& t : tokens) {
      TokenLogprob l{tok.token_to_piece(t.id), t.logprob, {}};
      for (const auto& [id, lp] : t.top) l.top.push_back({tok.token_to_piece(id), lp});
      out.push_back(std::move(l));
    }
    return out;
  }

  void complete(const httplib::Request& http, httplib::Response& res, RequestKind kind) {
    if (!authorized(http, res)) return;
    if (refusing) {
      send_error(res, ApiError(503, "the server is shutting down"));
      return;
    }
    Prepared p;
    std::shared_ptr<RequestStream> stream;
    try {
      p = prepare(http, kind);
      stream = engine.submit(p.prompt, p.params);
    } catch (const ApiError& e) {
      send_error(res, e);
      return;
    } catch (const UsageError& e) {
      send_error(res, ApiError(400, e.what()));
      return;
    }
    if (stream == nullptr && refusing) {
      send_error(res, ApiError(503, "the server is shutting down"));
      return;
    }
    if (stream == nullptr) {
      send_error(res, ApiError(429, "the server's queue is full; retry later"));
      return;
    }
    const bool chat = kind == RequestKind::Chat;
    ResponseHeader h;
    h.id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id);
    h.created = std::time(nullptr);
    h.model = o.model_id;
    h.include_usage = p.req.include_usage;
    const bool want_logprobs = p.params.logprobs >= 0;
    if (!p.req.stream) {
      std::vector<ChoiceResult> choices(static_cast<size_t>(p.params.n));
      for (int32_t i = 0; i < p.params.n; ++i) {
        choices[static_cast<size_t>(i)].index = i;
        if (want_logprobs) choices[static_cast<size_t>(i)].logprobs.emplace();
      }
      bool cancelled = false;
      while (!stream->done()) {
        auto ev = stream->next(std::chrono::milliseconds(100));
        if (!ev) continue;
        cancelled = cancelled || ev->finish == Finish::Cancelled;
        ChoiceResult& c = choices[static_cast<size_t>(ev->choice)];
        c.text += ev->text;
        if (want_logprobs) {
          for (auto& l : logprobs(ev->tokens)) c.logprobs->push_back(std::move(l));
        }
        if (const auto f = finish_reason(ev->finish)) c.finish_reason = *f;
      }
      if (cancelled) {  // the server is stopping and was told not to finish
        send_error(res, ApiError(503, "the request was cancelled: the server is shutting down"));
        return;
      }
      const RequestUsage u = stream->usage();
      const Usage usage{u.prompt_tokens, u.completion_tokens, u.cached_tokens};
      res.set_content(chat ? chat_response(h, choices, usage) : completion_response(h, choices, usage),
                      "application/json");
      return;
    }
    auto offsets = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(p.params.n), 0);
    auto started = std::make_shared<bool>(false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, stream, h, chat, want_logprobs, offsets, started, n = p.params.n](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) {
            if (sink.write(s.data(), s.size())) return true;
            stream->cancel();  // the client went away
            return false;
          };
          if (chat && !*started) {
            for (int32_t i = 0; i < n; ++i) {
              if (!write(sse_event(chat_role_chunk(h, i)))) return false;
            }
          }
          *started = true;
          if (stream->done()) {
            if (h.include_usage) {
              const RequestUsage u = stream->usage();
              if (!write(sse_event(usage_chunk(h, chat ? RequestKind::Chat : RequestKind::Completion,
                                               {u.prompt_tokens, u.completion_tokens, u.cached_tokens})))) {
                return false;
              }
            }
            if (!write(std::string(kSseDone))) return false;
            sink.done();
            return true;
          }
          auto ev = stream->next(std::chrono::milliseconds(100));
          if (!ev) {
            if (!sink.is_writable()) {
              stream->cancel();
              return false;
            }
            return true;
          }
          ChoiceDelta d;
          d.index = ev->choice;
          d.text = ev->text;
          d.finish_reason = finish_reason(ev->finish);
          if (want_logprobs) d.logprobs = logprobs(ev->tokens);
          int64_t& off = (*offsets)[static_cast<size_t>(ev->choice)];
          d.text_offset = off;
          off += static_cast<int64_t>(d.text.size());
          if (ev->text.empty() && !d.finish_reason && (!want_logprobs || ev->tokens.empty())) return true;
          return write(sse_event(chat ? chat_chunk(h, d) : completion_chunk(h, d)));
        },
        [stream](bool success) {
          if (!success) stream->cancel();
        });
  }
};

HttpServer::HttpServer(Engine& engine, const tokenizer::Tokenizer& tok,
                       const tokenizer::ChatTemplate* chat_template, HttpOptions options)
    : impl_(std::make_unique<Impl>(engine, tok, chat_template, std::move(options))) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  Impl& s = *impl_;
  if (s.o.port == 0) {
    const int port = s.svr.bind_to_any_port(s.o.host);
    if (port < 0) throw Error("cannot listen on " + s.o.host);
    s.o.port = port;
  } else if (!s.svr.bind_to_port(s.o.host, s.o.port)) {
    throw Error("cannot listen on " + s.o.host + ":" + std::to_string(s.o.port) +
                " (in use, or not an address of this machine)");
  }
  return s.o.port;
}

void HttpServer::listen() { impl_->svr.listen_after_bind(); }
void HttpServer::refuse_new() { impl_->refusing = true; }
void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace squeeze::serve
