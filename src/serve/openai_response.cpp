// Response, chunk, error and model-list bodies (openai.h), keys in the order of OpenAI's
// examples.
#include <cmath>
#include <nlohmann/json.hpp>

#include "serve/openai.h"

namespace squeeze::serve {

namespace {

using json = nlohmann::ordered_json;

// Invalid UTF-8 (a token that ends inside a character) is written as U+FFFD.
std::string dumped(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json null_or(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// JSON has no infinity: a token the distribution excludes gets OpenAI's "not in the top" value.
double logprob_value(float lp) { return std::isfinite(lp) ? lp : -9999.0; }

json token_bytes(const std::string& token) {
  json bytes = json::array();
  for (char c : token) bytes.push_back(static_cast<uint8_t>(c));
  return bytes;
}

// Completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
json completion_logprobs(const std::optional<std::vector<TokenLogprob>>& lps, int64_t offset) {
  if (!lps) return nullptr;
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       text_offset = json::array();
  for (const TokenLogprob& t : *lps) {
    tokens.push_back(t.token);
    token_logprobs.push_back(logprob_value(t.logprob));
    json alternatives = json::object();
    for (const TopLogprob& a : t.top) alternatives[a.token] = logprob_value(a.logprob);
    top.push_back(std::move(alternatives));
    text_offset.push_back(offset);
    offset += static_cast<int64_t>(t.token.size());
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(text_offset)}};
}

// Chat: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], refusal}.
json chat_logprobs(const std::optional<std::vector<TokenLogprob>>& lps) {
  if (!lps) return nullptr;
  json content = json::array();
  for (const TokenLogprob& t : *lps) {
    json top = json::array();
    for (const TopLogprob& a : t.top) {
      top.push_back({{"token", a.token},
                     {"logprob", logprob_value(a.logprob)},
                     {"bytes", token_bytes(a.token)}});
    }
    content.push_back({{"token", t.token},
                       {"logprob", logprob_value(t.logprob)},
                       {"bytes", token_bytes(t.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json finish_json(const std::optional<FinishReason>& r) {
  return r ? json(finish_reason_name(*r)) : json(nullptr);
}

// {id, object, created, model, choices}, and usage: null on chunks when include_usage.
json envelope(const ResponseHeader& h, std::string_view object, json choices, bool chunk) {
  json j = {{"id", h.id},
            {"object", object},
            {"created", h.created},
            {"model", h.model},
            {"choices", std::move(choices)}};
  if (chunk && h.include_usage) j["usage"] = nullptr;
  return j;
}

}  // namespace

std::string error_body(const ApiError& e) {
  return dumped({{"error",
                  {{"message", e.what()},
                   {"type", e.type},
                   {"param", null_or(e.param)},
                   {"code", null_or(e.code)}}}});
}

std::string_view finish_reason_name(FinishReason r) {
  return r == FinishReason::Length ? "length" : "stop";
}

std::string completion_response(const ResponseHeader& h, std::span<const ChoiceResult> choices,
                                const Usage& usage) {
  json out = json::array();
  for (const ChoiceResult& c : choices) {
    out.push_back({{"index", c.index},
                   {"text", c.text},
                   {"logprobs", completion_logprobs(c.logprobs, 0)},
                   {"finish_reason", finish_reason_name(c.finish_reason)}});
  }
  json j = envelope(h, "text_completion", std::move(out), false);
  j["usage"] = usage_json(usage);
  return dumped(j);
}

std::string chat_response(const ResponseHeader& h, std::span<const ChoiceResult> choices,
                          const Usage& usage) {
  json out = json::array();
  for (const ChoiceResult& c : choices) {
    out.push_back({{"index", c.index},
                   {"message", {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}}},
                   {"logprobs", chat_logprobs(c.logprobs)},
                   {"finish_reason", finish_reason_name(c.finish_reason)}});
  }
  json j = envelope(h, "chat.completion", std::move(out), false);
  j["usage"] = usage_json(usage);
  return dumped(j);
}

std::string completion_chunk(const ResponseHeader& h, const ChoiceDelta& d) {
  json choice = {{"index", d.index},
                 {"text", d.text},
                 {"logprobs", completion_logprobs(d.logprobs, d.text_offset)},
                 {"finish_reason", finish_json(d.finish_reason)}};
  return dumped(envelope(h, "text_completion", json::array({std::move(choice)}), true));
}

std::string chat_role_chunk(const ResponseHeader& h, int32_t index) {
  json choice = {{"index", index},
                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  return dumped(envelope(h, "chat.completion.chunk", json::array({std::move(choice)}), true));
}

std::string chat_chunk(const ResponseHeader& h, const ChoiceDelta& d) {
  json delta = json::object();
  if (!d.text.empty() || !d.finish_reason) delta["content"] = d.text;
  json choice = {{"index", d.index},
                 {"delta", std::move(delta)},
                 {"logprobs", chat_logprobs(d.logprobs)},
                 {"finish_reason", finish_json(d.finish_reason)}};
  return dumped(envelope(h, "chat.completion.chunk", json::array({std::move(choice)}), true));
}

std::string usage_chunk(const ResponseHeader& h, RequestKind kind, const Usage& usage) {
  json j = envelope(h, kind == RequestKind::Chat ? "chat.completion.chunk" : "text_completion",
                    json::array(), true);
  j["usage"] = usage_json(usage);
  return dumped(j);
}

std::string sse_event(std::string_view json_text) {
  std::string out;
  out.reserve(json_text.size() + 8);
  out.append("data: ").append(json_text).append("\n\n");
  return out;
}

std::string models_list(const std::string& model_id, int64_t created) {
  return dumped({{"object", "list"},
                 {"data", json::array({{{"id", model_id},
                                        {"object", "model"},
                                        {"created", created},
                                        {"owned_by", "squeeze"}}})}});
}

}  // namespace squeeze::serve
