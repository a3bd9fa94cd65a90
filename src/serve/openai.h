// The JSON of the OpenAI-compatible API, without HTTP: the bodies of POST /v1/completions and
// POST /v1/chat/completions parsed and checked into a CompletionRequest, the sampler settings
// it asks for, the response bodies (whole, or as server-sent events when streaming), error
// bodies and the model list of GET /v1/models. Shapes follow OpenAI's API reference; unknown
// request fields are ignored, as OpenAI-compatible servers do.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "sample/sampler.h"

namespace squeeze::serve {

// An error answered with an HTTP status and OpenAI's error body (error_body). Every request the
// parser refuses throws one with status 400 naming the field at fault in `param`.
struct ApiError : Error {
  ApiError(int status, const std::string& message, std::string param = {}, std::string code = {});

  int status;
  std::string type;   // OpenAI's error type, from the status (error_type)
  std::string param;  // the request field at fault ("temperature", "messages[1].role"); empty: none
  std::string code;   // a machine-readable code ("model_not_found"); empty: none
};

// OpenAI's error type for an HTTP status: 400, 413, 422 "invalid_request_error",
// 401 "authentication_error", 403 "permission_error", 404 "not_found_error",
// 429 "rate_limit_error", anything else "server_error".
std::string_view error_type(int status);

// {"error":{"message":...,"type":...,"param":...|null,"code":...|null}}
std::string error_body(const ApiError& e);

enum class RequestKind { Completion, Chat };

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant" ("developer" arrives as "system")
  std::string content;
};

// One request, checked: every field is in range (sampler_params of it passes sample::validate).
struct CompletionRequest {
  RequestKind kind = RequestKind::Completion;
  std::string model;  // may be empty
  // Completions: the prompt, as text or (prompt_tokens non-empty, prompt empty) as token ids,
  // ids >= 0 but not checked against a vocabulary. Chat: the messages, at least one.
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  std::vector<ChatMessage> messages;
  std::optional<int32_t> max_tokens;  // >= 1; absent: until the context is full
  float temperature = 1.0f;           // [0, 2]; 0: greedy
  float top_p = 1.0f;                 // [0, 1]
  std::optional<int64_t> seed;
  std::vector<std::string> stop;  // at most 4, none empty
  int32_t n = 1;                  // choices, [1, 8]
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage; only with stream
  // Completions `logprobs: k` (k in [0, 5]); chat `logprobs: true` with `top_logprobs: k`
  // (k in [0, 20]): the chosen token's logprob and the k most likely alternatives.
  bool logprobs = false;
  int32_t top_logprobs = 0;
  float presence_penalty = 0.0f;   // [-2, 2]
  float frequency_penalty = 0.0f;  // [-2, 2]
  // Extensions (llama.cpp's names): 0 / 0 / 1 turn them off.
  int32_t top_k = 0;            // >= 0
  float min_p = 0.0f;           // [0, 1)
  float repeat_penalty = 1.0f;  // > 0
};

// Parses and checks a request body. Throws ApiError 400 for a body that is not a JSON object,
// a missing prompt or messages, a field of the wrong type or out of range ("'temperature' must
// be a number between 0 and 2, got 3.5"), more than one prompt, and the fields squeeze does
// not implement when they would change the result (echo, suffix, best_of > 1, logit_bias,
// tools, functions, a response_format other than text). JSON null counts as absent.
CompletionRequest parse_request(std::string_view body, RequestKind kind);

// The sampler for choice `choice` of a request: its temperature, cuts and penalties over the
// sampler's default window (repeat_last_n), seeded with the request's seed, else
// `default_seed`, plus `choice` (so the n choices of one seed differ). top_p = 0 keeps the
// most likely token alone (top_k = 1).
sample::SamplerParams sampler_params(const CompletionRequest& r, uint64_t default_seed,
                                     int32_t choice = 0);

enum class FinishReason { Stop, Length };  // "stop" (end of generation or a stop string), "length"
std::string_view finish_reason_name(FinishReason r);

struct TopLogprob {
  std::string token;  // the token's bytes: may be part of a UTF-8 character
  float logprob;
};

struct TokenLogprob {
  std::string token;            // the chosen token's bytes
  float logprob;                // not finite: written as -9999
  std::vector<TopLogprob> top;  // the most likely tokens, most likely first
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // over all choices
  int64_t cached_tokens = 0;      // prompt tokens the prefix cache served
};

// What every object of one response shares.
struct ResponseHeader {
  std::string id;       // "cmpl-..." or "chatcmpl-...", the same in every chunk
  int64_t created = 0;  // unix seconds
  std::string model;
  bool include_usage = false;  // streaming: every chunk but usage_chunk carries "usage": null
};

// One finished choice.
struct ChoiceResult {
  int32_t index = 0;
  std::string text;
  FinishReason finish_reason = FinishReason::Stop;
  std::optional<std::vector<TokenLogprob>> logprobs;  // one per token of text; absent: null
};

// Non-streaming bodies: object "text_completion" (logprobs as tokens, token_logprobs,
// top_logprobs, text_offset in bytes) and "chat.completion" (message {role: "assistant",
// content}, logprobs as {content: [{token, logprob, bytes, top_logprobs}]}). Text that is not
// valid UTF-8 is written with U+FFFD in its place (the bytes fields keep the exact bytes).
std::string completion_response(const ResponseHeader& h, std::span<const ChoiceResult> choices,
                                const Usage& usage);
std::string chat_response(const ResponseHeader& h, std::span<const ChoiceResult> choices,
                          const Usage& usage);

// New text of one choice while streaming.
struct ChoiceDelta {
  int32_t index = 0;
  std::string text;                                   // since the choice's last chunk
  std::optional<FinishReason> finish_reason;          // on the choice's last chunk only
  std::optional<std::vector<TokenLogprob>> logprobs;  // the tokens of text; absent: null
  int64_t text_offset = 0;  // completions: byte offset of text in the choice's whole text
};

// A streaming chunk of /v1/completions: object "text_completion", choices [{index, text,
// logprobs, finish_reason (null until the last)}].
std::string completion_chunk(const ResponseHeader& h, const ChoiceDelta& d);
// The first chunk of each chat choice: delta {role: "assistant", content: ""}.
std::string chat_role_chunk(const ResponseHeader& h, int32_t index);
// A chat chunk, object "chat.completion.chunk": delta {content} (an empty delta {} on a last
// chunk without text), logprobs, finish_reason.
std::string chat_chunk(const ResponseHeader& h, const ChoiceDelta& d);
// The chunk after every choice's last, when include_usage: choices [] and the usage.
std::string usage_chunk(const ResponseHeader& h, RequestKind kind, const Usage& usage);

// Server-sent-event framing: "data: <json>\n\n" for json on one line (as the builders above
// write it); the stream ends with kSseDone.
std::string sse_event(std::string_view json);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// GET /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by"}]}.
std::string models_list(const std::string& model_id, int64_t created);

}  // namespace squeeze::serve
