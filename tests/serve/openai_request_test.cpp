// Request parsing of the OpenAI API (serve/openai.h): every field read, every refusal with its
// status, param and message, and the sampler settings a request maps to.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "sample/sampler.h"
#include "serve/openai.h"

namespace squeeze::serve {
namespace {

constexpr RequestKind kCompletion = RequestKind::Completion;
constexpr RequestKind kChat = RequestKind::Chat;

TEST(OpenAiRequest, CompletionDefaults) {
  const CompletionRequest r = parse_request(R"({"prompt": "Once upon"})", kCompletion);
  EXPECT_EQ(r.kind, kCompletion);
  EXPECT_EQ(r.prompt, "Once upon");
  EXPECT_TRUE(r.prompt_tokens.empty());
  EXPECT_TRUE(r.model.empty());
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.temperature, 1.0f);
  EXPECT_EQ(r.top_p, 1.0f);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_TRUE(r.stop.empty());
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_EQ(r.presence_penalty, 0.0f);
  EXPECT_EQ(r.frequency_penalty, 0.0f);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_EQ(r.min_p, 0.0f);
  EXPECT_EQ(r.repeat_penalty, 1.0f);
}

TEST(OpenAiRequest, CompletionEveryField) {
  const CompletionRequest r = parse_request(R"({
    "model": "smollm2", "prompt": "Hi", "max_tokens": 32, "temperature": 0.5, "top_p": 0.9,
    "seed": -7, "stop": ["\n", "END"], "n": 3, "stream": true,
    "stream_options": {"include_usage": true}, "logprobs": 2, "presence_penalty": -1.5,
    "frequency_penalty": 0.25, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1,
    "user": "ignored", "unknown": {"nested": [1, 2]}})",
                                            kCompletion);
  EXPECT_EQ(r.model, "smollm2");
  EXPECT_EQ(r.prompt, "Hi");
  EXPECT_EQ(r.max_tokens, 32);
  EXPECT_EQ(r.temperature, 0.5f);
  EXPECT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.seed, -7);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.presence_penalty, -1.5f);
  EXPECT_EQ(r.frequency_penalty, 0.25f);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.min_p, 0.05f);
  EXPECT_EQ(r.repeat_penalty, 1.1f);
}

TEST(OpenAiRequest, CompletionLogprobsZeroMeansChosenTokenOnly) {
  const CompletionRequest r = parse_request(R"({"prompt": "a", "logprobs": 0})", kCompletion);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
}

TEST(OpenAiRequest, PromptForms) {
  EXPECT_EQ(parse_request(R"({"prompt": ["one"]})", kCompletion).prompt, "one");
  EXPECT_EQ(parse_request(R"({"prompt": ""})", kCompletion).prompt, "");
  const std::vector<int32_t> ids = {1, 22, 333};
  EXPECT_EQ(parse_request(R"({"prompt": [1, 22, 333]})", kCompletion).prompt_tokens, ids);
  EXPECT_EQ(parse_request(R"({"prompt": [[1, 22, 333]]})", kCompletion).prompt_tokens, ids);
  EXPECT_EQ(parse_request(R"({"prompt": [2147483647]})", kCompletion).prompt_tokens,
            std::vector<int32_t>{2147483647});
}

TEST(OpenAiRequest, ChatEveryField) {
  const CompletionRequest r = parse_request(R"({
    "model": "m", "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "What is "},
                                   {"type": "text", "text": "2+2?"}], "name": "ann"},
      {"role": "assistant", "content": null},
      {"role": "assistant", "content": "Four."},
      {"role": "system", "content": ""}],
    "max_completion_tokens": 7, "max_tokens": 99, "logprobs": true, "top_logprobs": 20,
    "temperature": 0, "stream": false})",
                                            kChat);
  EXPECT_EQ(r.kind, kChat);
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "What is 2+2?");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].content, "Four.");
  EXPECT_EQ(r.messages[4].role, "system");
  EXPECT_EQ(r.max_tokens, 7);  // max_completion_tokens wins over the deprecated max_tokens
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 20);
  EXPECT_EQ(r.temperature, 0.0f);
  EXPECT_TRUE(r.prompt.empty());
}

TEST(OpenAiRequest, ChatDeprecatedMaxTokensAndLogprobsWithoutTop) {
  const CompletionRequest r = parse_request(
      R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, "logprobs": true})",
      kChat);
  EXPECT_EQ(r.max_tokens, 12);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 0);
}

TEST(OpenAiRequest, NullIsAbsentAndIntegralNumbersAreIntegers) {
  const CompletionRequest r = parse_request(
      R"({"prompt": "x", "temperature": null, "stop": null, "seed": null, "max_tokens": 5.0,
          "n": 2.0, "stream_options": null, "logprobs": null, "model": null, "echo": false,
          "suffix": "", "best_of": 1, "logit_bias": {}, "tools": [],
          "response_format": {"type": "text"}})",
      kCompletion);
  EXPECT_EQ(r.temperature, 1.0f);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.n, 2);
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(parse_request(R"({"prompt": "x", "stop": "\n"})", kCompletion).stop,
            std::vector<std::string>{"\n"});
  EXPECT_EQ(parse_request(R"({"prompt": "x", "seed": 9223372036854775807})", kCompletion).seed,
            INT64_MAX);
}

struct Refusal {
  RequestKind kind;
  const char* body;
  const char* param;    // "" when the error names none
  const char* message;  // a part of the message
};

const Refusal kRefusals[] = {
    // The body itself.
    {kCompletion, "", "", "not valid JSON"},
    {kCompletion, "{\"prompt\": \"a\",}", "", "not valid JSON"},
    {kCompletion, "{\"prompt\": \"\xff\"}", "", "not valid JSON"},
    {kCompletion, "{\"prompt\": \"a\", \"temperature\": 1e400}", "", "not valid JSON"},
    {kCompletion, "[1]", "", "must be a JSON object"},
    {kChat, "\"hello\"", "", "must be a JSON object"},
    // The prompt.
    {kCompletion, "{}", "prompt", "'prompt' is required"},
    {kCompletion, R"({"prompt": null})", "prompt", "'prompt' is required"},
    {kCompletion, R"({"prompt": 5})", "prompt", "must be a string, an array of one string"},
    {kCompletion, R"({"prompt": []})", "prompt", "must not be an empty array"},
    {kCompletion, R"({"prompt": [[]]})", "prompt", "'prompt[0]' must not be an empty array"},
    {kCompletion, R"({"prompt": ["a", "b"]})", "prompt", "only one prompt is supported, got 2"},
    {kCompletion, R"({"prompt": [[1], [2]]})", "prompt", "only one prompt is supported, got 2"},
    {kCompletion, R"({"prompt": [1, "a"]})", "prompt", "must be a string, an array of one"},
    {kCompletion, R"({"prompt": [1, -2]})", "prompt[1]", "'prompt[1]' must be a token id"},
    {kCompletion, R"({"prompt": [[3, 2147483648]]})", "prompt[0][1]", "got 2147483648"},
    // The messages.
    {kChat, R"({"prompt": "a"})", "messages", "'messages' is required"},
    {kChat, R"({"messages": []})", "messages", "must be a non-empty array"},
    {kChat, R"({"messages": "hi"})", "messages", "got \"hi\""},
    {kChat, R"({"messages": [5]})", "messages[0]", "'messages[0]' must be an object"},
    {kChat, R"({"messages": [{"content": "a"}]})", "messages[0].role", "is required"},
    {kChat, R"({"messages": [{"role": "tool", "content": "a"}]})", "messages[0].role",
     "must be one of system, developer, user, assistant, got \"tool\""},
    {kChat, R"({"messages": [{"role": 1, "content": "a"}]})", "messages[0].role", "got 1"},
    {kChat, R"({"messages": [{"role": "user"}]})", "messages[0].content", "is required"},
    {kChat, R"({"messages": [{"role": "user", "content": 3}]})", "messages[0].content",
     "must be a string or an array of text parts"},
    {kChat,
     R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
     "messages[0].content[0].type", "only text parts are supported), got \"image_url\""},
    {kChat, R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
     "messages[0].content[0].text", "must be a string, got null"},
    {kChat, R"({"messages": [{"role": "user", "content": ["a"]}]})", "messages[0].content[0]",
     "must be an object"},
    // Numbers and their ranges.
    {kCompletion, R"({"prompt": "a", "temperature": 3.5})", "temperature",
     "'temperature' must be a number between 0 and 2, got 3.5"},
    {kCompletion, R"({"prompt": "a", "temperature": -0.1})", "temperature", "got -0.1"},
    {kCompletion, R"({"prompt": "a", "temperature": "hot"})", "temperature", "got \"hot\""},
    {kCompletion, R"({"prompt": "a", "temperature": true})", "temperature", "got true"},
    {kCompletion, R"({"prompt": "a", "top_p": 1.5})", "top_p", "between 0 and 1"},
    {kCompletion, R"({"prompt": "a", "max_tokens": 0})", "max_tokens",
     "'max_tokens' must be an integer >= 1, got 0"},
    {kCompletion, R"({"prompt": "a", "max_tokens": 1.5})", "max_tokens", "got 1.5"},
    {kCompletion, R"({"prompt": "a", "max_tokens": "10"})", "max_tokens", "got \"10\""},
    {kCompletion, R"({"prompt": "a", "max_tokens": 2147483648})", "max_tokens", "integer >= 1"},
    {kChat, R"({"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 0})",
     "max_completion_tokens", "integer >= 1"},
    {kChat, R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": -1})", "max_tokens",
     "integer >= 1"},
    {kCompletion, R"({"prompt": "a", "seed": 1.5})", "seed", "must be an integer"},
    {kCompletion, R"({"prompt": "a", "seed": "1"})", "seed", "must be an integer"},
    {kCompletion, R"({"prompt": "a", "seed": 18446744073709551615})", "seed", "an integer"},
    {kCompletion, R"({"prompt": "a", "seed": 1e19})", "seed", "an integer"},
    {kCompletion, R"({"prompt": "a", "n": 0})", "n", "between 1 and 8, got 0"},
    {kCompletion, R"({"prompt": "a", "n": 9})", "n", "between 1 and 8, got 9"},
    {kCompletion, R"({"prompt": "a", "presence_penalty": 2.5})", "presence_penalty",
     "between -2 and 2"},
    {kCompletion, R"({"prompt": "a", "frequency_penalty": -3})", "frequency_penalty",
     "between -2 and 2, got -3"},
    {kCompletion, R"({"prompt": "a", "top_k": -1})", "top_k", "integer >= 0"},
    {kCompletion, R"({"prompt": "a", "min_p": 1})", "min_p", "in [0, 1)"},
    {kCompletion, R"({"prompt": "a", "min_p": 0.99999999999})", "min_p", "in [0, 1)"},
    {kCompletion, R"({"prompt": "a", "repeat_penalty": 0})", "repeat_penalty", "> 0"},
    {kCompletion, R"({"prompt": "a", "repeat_penalty": 1e300})", "repeat_penalty", "> 0"},
    {kCompletion, R"({"prompt": "a", "repeat_penalty": 1e-300})", "repeat_penalty", "> 0"},
    // Strings, booleans, stop.
    {kCompletion, R"({"prompt": "a", "model": 5})", "model", "must be a string"},
    {kCompletion, R"({"prompt": "a", "stop": ""})", "stop", "a non-empty string or an array"},
    {kCompletion, R"({"prompt": "a", "stop": 5})", "stop", "got 5"},
    {kCompletion, R"({"prompt": "a", "stop": ["a", ""]})", "stop[1]", "a non-empty string"},
    {kCompletion, R"({"prompt": "a", "stop": ["a", 1]})", "stop[1]", "got 1"},
    {kCompletion, R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})", "stop",
     "up to 4 of them, got an array of 5"},
    {kCompletion, R"({"prompt": "a", "stream": "yes"})", "stream", "must be a boolean"},
    {kCompletion, R"({"prompt": "a", "stream_options": {"include_usage": true}})", "stream_options",
     "only allowed when 'stream' is true"},
    {kCompletion, R"({"prompt": "a", "stream": false, "stream_options": {}})", "stream_options",
     "only allowed"},
    {kCompletion, R"({"prompt": "a", "stream": true, "stream_options": 1})", "stream_options",
     "must be an object"},
    {kCompletion, R"({"prompt": "a", "stream": true, "stream_options": {"include_usage": 1}})",
     "stream_options.include_usage", "must be a boolean"},
    // Logprobs.
    {kCompletion, R"({"prompt": "a", "logprobs": 6})", "logprobs", "between 0 and 5, got 6"},
    {kCompletion, R"({"prompt": "a", "logprobs": true})", "logprobs", "got true"},
    {kChat, R"({"messages": [{"role": "user", "content": "a"}], "logprobs": 1})", "logprobs",
     "must be a boolean"},
    {kChat,
     R"({"messages": [{"role": "user", "content": "a"}], "logprobs": true, "top_logprobs": 21})",
     "top_logprobs", "between 0 and 20"},
    {kChat, R"({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 2})",
     "top_logprobs", "requires 'logprobs' to be true"},
    // Known fields squeeze does not implement.
    {kCompletion, R"({"prompt": "a", "echo": true})", "echo", "does not support 'echo': true"},
    {kCompletion, R"({"prompt": "a", "suffix": "end"})", "suffix", "does not support"},
    {kCompletion, R"({"prompt": "a", "best_of": 2})", "best_of", "does not support"},
    {kCompletion, R"({"prompt": "a", "logit_bias": {"1": 5}})", "logit_bias", "does not support"},
    {kChat, R"({"messages": [{"role": "user", "content": "a"}], "tools": [{}]})", "tools",
     "does not support 'tools'"},
    {kChat,
     R"({"messages": [{"role": "user", "content": "a"}], "response_format": {"type":"json_object"}})",
     "response_format", "does not support 'response_format' of type \"json_object\""},
};

TEST(OpenAiRequest, RefusalsAre400NamingTheParam) {
  for (const Refusal& c : kRefusals) {
    SCOPED_TRACE(c.body);
    try {
      (void)parse_request(c.body, c.kind);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.type, "invalid_request_error");
      EXPECT_EQ(e.param, c.param);
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
}

TEST(OpenAiRequest, RefusalIsASqueezeError) {
  EXPECT_THROW((void)parse_request("{", kCompletion), Error);
}

TEST(OpenAiRequest, LongValuesAreCutInTheMessage) {
  const std::string body = R"({"prompt": "a", "temperature": ")" + std::string(10000, 'x') + "\"}";
  try {
    (void)parse_request(body, kCompletion);
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_LT(std::string(e.what()).size(), 200u);
    EXPECT_NE(std::string(e.what()).find("xxx..."), std::string::npos);
  }
}

TEST(OpenAiRequest, DeepNestingIsRefusedWithoutRecursing) {
  constexpr int kDepth = 200000;
  const std::string body = R"({"prompt": "a", "temperature": )" + std::string(kDepth, '[') +
                           std::string(kDepth, ']') + "}";
  try {
    (void)parse_request(body, kCompletion);
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "temperature");
    EXPECT_NE(std::string(e.what()).find("got an array of 1"), std::string::npos) << e.what();
  }
}

TEST(OpenAiRequest, SamplerParamsFromTheRequest) {
  const CompletionRequest r = parse_request(
      R"({"prompt": "a", "temperature": 0.7, "top_p": 0.8, "top_k": 5, "min_p": 0.1,
          "repeat_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": -0.5})",
      kCompletion);
  const sample::SamplerParams p = sampler_params(r, 1234);
  EXPECT_EQ(p.temp, 0.7f);
  EXPECT_EQ(p.top_p, 0.8f);
  EXPECT_EQ(p.top_k, 5);
  EXPECT_EQ(p.min_p, 0.1f);
  EXPECT_EQ(p.repeat_penalty, 1.3f);
  EXPECT_EQ(p.presence_penalty, 0.5f);
  EXPECT_EQ(p.frequency_penalty, -0.5f);
  EXPECT_EQ(p.repeat_last_n, sample::SamplerParams{}.repeat_last_n);
  EXPECT_EQ(p.seed, 1234u);                           // no seed in the request: the caller's
  EXPECT_EQ(sampler_params(r, 1234, 2).seed, 1236u);  // choice 2
  EXPECT_NO_THROW(sample::validate(p));
}

TEST(OpenAiRequest, SamplerParamsDefaultsTurnEveryCutOff) {
  const sample::SamplerParams p =
      sampler_params(parse_request(R"({"prompt": "a", "seed": -1})", kCompletion), 5);
  EXPECT_EQ(p.temp, 1.0f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.min_p, 0.0f);
  EXPECT_EQ(p.repeat_penalty, 1.0f);
  EXPECT_EQ(p.presence_penalty, 0.0f);
  EXPECT_EQ(p.frequency_penalty, 0.0f);
  EXPECT_EQ(p.seed, UINT64_MAX);  // the request's seed, -1 as 64 bits
}

TEST(OpenAiRequest, TopPZeroKeepsTheMostLikelyToken) {
  const sample::SamplerParams p =
      sampler_params(parse_request(R"({"prompt": "a", "top_p": 0})", kCompletion), 0);
  EXPECT_NO_THROW(sample::validate(p));
  sample::Sampler s(p, 4);
  const std::vector<float> logits = {0.0f, 1.0f, 0.9f, -1.0f};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits), 1);
}

TEST(OpenAiRequest, ExtremesOfEveryRangePassTheSampler) {
  for (const char* body :
       {R"({"prompt": "a", "temperature": 2, "top_p": 1, "min_p": 0.999999, "repeat_penalty": 1e-30,
            "presence_penalty": -2, "frequency_penalty": 2, "top_k": 2147483647})",
        R"({"prompt": "a", "temperature": 0, "top_p": 1e-45, "repeat_penalty": 3e38,
            "presence_penalty": 2, "frequency_penalty": -2})"}) {
    SCOPED_TRACE(body);
    EXPECT_NO_THROW(sample::validate(sampler_params(parse_request(body, kCompletion), 0)));
  }
}

TEST(OpenAiError, TypeFromStatus) {
  EXPECT_EQ(error_type(400), "invalid_request_error");
  EXPECT_EQ(error_type(413), "invalid_request_error");
  EXPECT_EQ(error_type(401), "authentication_error");
  EXPECT_EQ(error_type(404), "not_found_error");
  EXPECT_EQ(error_type(429), "rate_limit_error");
  EXPECT_EQ(error_type(500), "server_error");
  EXPECT_EQ(error_type(503), "server_error");
  const ApiError e(404, "no model x", "model", "model_not_found");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.type, "not_found_error");
  EXPECT_EQ(e.param, "model");
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_STREQ(e.what(), "no model x");
}

}  // namespace
}  // namespace squeeze::serve
