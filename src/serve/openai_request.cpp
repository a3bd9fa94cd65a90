// Parsing and checking request bodies (openai.h): each field read by one typed getter that
// throws ApiError 400 naming the field, the value it got and what it must be.
#include <cfloat>
#include <cmath>
#include <nlohmann/json.hpp>

#include "serve/openai.h"

namespace squeeze::serve {

namespace {

using nlohmann::json;

// A scalar as the client wrote it, cut to a readable length; arrays and objects by their kind
// (dumping them would recurse as deep as the client nested them).
std::string shown(const json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size());
  if (v.is_object()) return "an object";
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMax = 64;
  if (s.size() > kMax) s = s.substr(0, kMax - 3) + "...";
  return s;
}

[[noreturn]] void must_be(const std::string& param, std::string_view what, const json& got) {
  throw ApiError(400, "'" + param + "' must be " + std::string(what) + ", got " + shown(got),
                 param);
}

[[noreturn]] void unsupported(const std::string& param, std::string_view what) {
  throw ApiError(400, "squeeze does not support " + std::string(what), param);
}

// The field `key` of `obj`; nullptr when it is missing or null.
const json* field(const json& obj, const std::string& key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// A number that fits a float, checked on the float the sampler will see.
template <typename Ok>
std::optional<float> get_float(const json& obj, const std::string& key, std::string_view what,
                               Ok ok) {
  const json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) must_be(key, what, *v);
  const double d = v->get<double>();
  if (!(std::fabs(d) <= FLT_MAX) || !ok(static_cast<float>(d))) must_be(key, what, *v);
  return static_cast<float>(d);
}

float get_float_in(const json& obj, const std::string& key, int lo, int hi, float def) {
  const std::string what = "a number between " + std::to_string(lo) + " and " + std::to_string(hi);
  const auto in = [&](float f) {
    return f >= static_cast<float>(lo) && f <= static_cast<float>(hi);
  };
  return get_float(obj, key, what, in).value_or(def);
}

// An integer in [lo, hi]; a number with a fraction is not one, 2.0 is.
std::optional<int64_t> get_int(const json& obj, const std::string& key, int64_t lo, int64_t hi,
                               std::string_view what) {
  const json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  int64_t i = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) must_be(key, what, *v);
    i = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    i = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d != std::floor(d) || !(d >= -0x1p63 && d < 0x1p63)) must_be(key, what, *v);
    i = static_cast<int64_t>(d);
  } else {
    must_be(key, what, *v);
  }
  if (i < lo || i > hi) must_be(key, what, *v);
  return i;
}

std::optional<bool> get_bool(const json& obj, const std::string& key) {
  const json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) must_be(key, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& obj, const std::string& key) {
  const json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) must_be(key, "a string", *v);
  return v->get<std::string>();
}

// A token id of a prompt given as ids.
int32_t token_id(const json& v, const std::string& param) {
  const bool ok = v.is_number_unsigned() ? v.get<uint64_t>() <= INT32_MAX
                                         : v.is_number_integer() && v.get<int64_t>() >= 0;
  if (!ok) must_be(param, "a token id (an integer >= 0)", v);
  return static_cast<int32_t>(v.get<int64_t>());
}

std::vector<int32_t> token_ids(const json& arr, const std::string& param) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    ids.push_back(token_id(arr[i], param + "[" + std::to_string(i) + "]"));
  }
  return ids;
}

bool all_integers(const json& arr) {
  for (const json& v : arr) {
    if (!v.is_number_integer()) return false;
  }
  return true;
}

// Completions: a string, an array of one string, an array of token ids or an array of one
// array of token ids.
void parse_prompt(const json& body, CompletionRequest& r) {
  constexpr std::string_view kWhat = "a string, an array of one string or an array of token ids";
  const json* v = field(body, "prompt");
  if (v == nullptr) throw ApiError(400, "'prompt' is required", "prompt");
  if (v->is_string()) {
    r.prompt = v->get<std::string>();
    return;
  }
  if (!v->is_array()) must_be("prompt", kWhat, *v);
  if (v->empty()) throw ApiError(400, "'prompt' must not be an empty array", "prompt");
  if (all_integers(*v)) {
    r.prompt_tokens = token_ids(*v, "prompt");
    return;
  }
  const json& first = (*v)[0];
  if (!first.is_string() && !(first.is_array() && all_integers(first))) {
    must_be("prompt", kWhat, *v);
  }
  if (v->size() > 1) {
    throw ApiError(400, "only one prompt is supported, got " + std::to_string(v->size()), "prompt");
  }
  if (first.is_string()) {
    r.prompt = first.get<std::string>();
  } else {
    if (first.empty()) throw ApiError(400, "'prompt[0]' must not be an empty array", "prompt");
    r.prompt_tokens = token_ids(first, "prompt[0]");
  }
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts, joined.
std::string message_content(const json& m, const std::string& param, const std::string& role) {
  const json* c = field(m, "content");
  if (c == nullptr) {
    if (role == "assistant") return {};  // an assistant turn may carry no text
    throw ApiError(400, "'" + param + "' is required", param);
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) must_be(param, "a string or an array of text parts", *c);
  std::string text;
  for (size_t j = 0; j < c->size(); ++j) {
    const std::string part = param + "[" + std::to_string(j) + "]";
    const json& p = (*c)[j];
    if (!p.is_object()) must_be(part, "an object", p);
    const json* type = field(p, "type");
    if (type == nullptr || *type != "text") {
      must_be(part + ".type", "\"text\" (only text parts are supported)", type ? *type : json());
    }
    const json* t = field(p, "text");
    if (t == nullptr || !t->is_string()) must_be(part + ".text", "a string", t ? *t : json());
    text += t->get<std::string>();
  }
  return text;
}

void parse_messages(const json& body, CompletionRequest& r) {
  const json* v = field(body, "messages");
  if (v == nullptr) throw ApiError(400, "'messages' is required", "messages");
  if (!v->is_array() || v->empty()) must_be("messages", "a non-empty array of messages", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    const json& m = (*v)[i];
    if (!m.is_object()) must_be(param, "an object", m);
    const json* role = field(m, "role");
    constexpr std::string_view kRoles = "one of system, developer, user, assistant";
    if (role == nullptr) throw ApiError(400, "'" + param + ".role' is required", param + ".role");
    if (!role->is_string()) must_be(param + ".role", kRoles, *role);
    std::string name = role->get<std::string>();
    if (name == "developer") name = "system";
    if (name != "system" && name != "user" && name != "assistant") {
      must_be(param + ".role", kRoles, *role);
    }
    r.messages.push_back({name, message_content(m, param + ".content", name)});
  }
}

void parse_stop(const json& body, CompletionRequest& r) {
  constexpr std::string_view kWhat = "a non-empty string or an array of up to 4 of them";
  const json* v = field(body, "stop");
  if (v == nullptr) return;
  if (v->is_string()) {
    if (v->get_ref<const std::string&>().empty()) must_be("stop", kWhat, *v);
    r.stop.push_back(v->get<std::string>());
    return;
  }
  if (!v->is_array() || v->size() > 4) must_be("stop", kWhat, *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const json& s = (*v)[i];
    if (!s.is_string() || s.get_ref<const std::string&>().empty()) {
      must_be("stop[" + std::to_string(i) + "]", "a non-empty string", s);
    }
    r.stop.push_back(s.get<std::string>());
  }
}

void parse_logprobs(const json& body, CompletionRequest& r) {
  if (r.kind == RequestKind::Completion) {
    const std::optional<int64_t> k = get_int(body, "logprobs", 0, 5, "an integer between 0 and 5");
    r.logprobs = k.has_value();
    r.top_logprobs = static_cast<int32_t>(k.value_or(0));
    return;
  }
  r.logprobs = get_bool(body, "logprobs").value_or(false);
  const std::optional<int64_t> k =
      get_int(body, "top_logprobs", 0, 20, "an integer between 0 and 20");
  if (k && !r.logprobs) {
    throw ApiError(400, "'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  }
  r.top_logprobs = static_cast<int32_t>(k.value_or(0));
}

void parse_stream(const json& body, CompletionRequest& r) {
  r.stream = get_bool(body, "stream").value_or(false);
  const json* o = field(body, "stream_options");
  if (o == nullptr) return;
  if (!r.stream) {
    throw ApiError(400, "'stream_options' is only allowed when 'stream' is true", "stream_options");
  }
  if (!o->is_object()) must_be("stream_options", "an object", *o);
  const json* u = field(*o, "include_usage");
  if (u == nullptr) return;
  if (!u->is_boolean()) must_be("stream_options.include_usage", "a boolean", *u);
  r.include_usage = u->get<bool>();
}

// Known fields that would change the result if set, which squeeze does not implement.
void refuse_unsupported(const json& body) {
  if (get_bool(body, "echo").value_or(false)) unsupported("echo", "'echo': true");
  if (const json* s = field(body, "suffix");
      s != nullptr && !(s->is_string() && s->get_ref<const std::string&>().empty())) {
    unsupported("suffix", "'suffix'");
  }
  if (get_int(body, "best_of", 1, INT32_MAX, "an integer >= 1").value_or(1) > 1) {
    unsupported("best_of", "'best_of' > 1");
  }
  for (const char* key : {"logit_bias", "tools", "functions"}) {
    const json* v = field(body, key);
    if (v != nullptr && !((v->is_object() || v->is_array()) && v->empty())) {
      unsupported(key, "'" + std::string(key) + "'");
    }
  }
  if (const json* f = field(body, "response_format"); f != nullptr) {
    if (!f->is_object()) must_be("response_format", "an object", *f);
    const json* type = field(*f, "type");
    if (type != nullptr && *type != "text") {
      unsupported("response_format", "'response_format' of type " + shown(*type));
    }
  }
}

}  // namespace

ApiError::ApiError(int status, const std::string& message, std::string param, std::string code)
    : Error(message),
      status(status),
      type(error_type(status)),
      param(std::move(param)),
      code(std::move(code)) {}

std::string_view error_type(int status) {
  switch (status) {
    case 400:
    case 413:
    case 422:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    default:
      return "server_error";
  }
}

CompletionRequest parse_request(std::string_view text, RequestKind kind) {
  json body;
  try {
    body = json::parse(text);
  } catch (const json::exception& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, ..."
    std::string why = e.what();
    if (const size_t end = why.find("] "); why.starts_with("[json.") && end != std::string::npos) {
      why.erase(0, end + 2);
    }
    throw ApiError(400, "the body is not valid JSON: " + why);
  }
  if (!body.is_object()) throw ApiError(400, "the body must be a JSON object");

  CompletionRequest r;
  r.kind = kind;
  r.model = get_string(body, "model").value_or("");
  if (kind == RequestKind::Completion) {
    parse_prompt(body, r);
    r.max_tokens = get_int(body, "max_tokens", 1, INT32_MAX, "an integer >= 1");
  } else {
    parse_messages(body, r);
    r.max_tokens = get_int(body, "max_completion_tokens", 1, INT32_MAX, "an integer >= 1");
    if (!r.max_tokens) r.max_tokens = get_int(body, "max_tokens", 1, INT32_MAX, "an integer >= 1");
  }
  r.temperature = get_float_in(body, "temperature", 0, 2, 1.0f);
  r.top_p = get_float_in(body, "top_p", 0, 1, 1.0f);
  r.seed = get_int(body, "seed", INT64_MIN, INT64_MAX, "an integer");
  parse_stop(body, r);
  r.n = static_cast<int32_t>(get_int(body, "n", 1, 8, "an integer between 1 and 8").value_or(1));
  parse_stream(body, r);
  parse_logprobs(body, r);
  r.presence_penalty = get_float_in(body, "presence_penalty", -2, 2, 0.0f);
  r.frequency_penalty = get_float_in(body, "frequency_penalty", -2, 2, 0.0f);
  r.top_k = static_cast<int32_t>(
      get_int(body, "top_k", 0, INT32_MAX, "an integer >= 0 (0: off)").value_or(0));
  r.min_p = get_float(body, "min_p", "a number in [0, 1)", [](float f) {
              return f >= 0.0f && f < 1.0f;
            }).value_or(0.0f);
  r.repeat_penalty = get_float(body, "repeat_penalty", "a number > 0 (1: off)", [](float f) {
                       return f > 0.0f;
                     }).value_or(1.0f);
  refuse_unsupported(body);
  return r;
}

sample::SamplerParams sampler_params(const CompletionRequest& r, uint64_t default_seed,
                                     int32_t choice) {
  sample::SamplerParams p;  // repeat_last_n: the sampler's default window
  p.temp = r.temperature;
  p.top_k = r.top_k;
  p.top_p = r.top_p;
  if (r.top_p == 0.0f) {  // the smallest set with mass >= 0: the most likely token
    p.top_k = 1;
    p.top_p = 1.0f;
  }
  p.min_p = r.min_p;
  p.repeat_penalty = r.repeat_penalty;
  p.presence_penalty = r.presence_penalty;
  p.frequency_penalty = r.frequency_penalty;
  p.seed = (r.seed ? static_cast<uint64_t>(*r.seed) : default_seed) + static_cast<uint64_t>(choice);
  return p;
}

}  // namespace squeeze::serve
