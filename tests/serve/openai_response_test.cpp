// Response bodies of the OpenAI API (serve/openai.h), read back as JSON: the fields OpenAI's
// clients read, the streaming chunks and their server-sent-event framing, errors, models.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/openai.h"

namespace squeeze::serve {
namespace {

using nlohmann::json;

ResponseHeader header(bool include_usage = false) {
  return {"cmpl-abc", 1700000000, "smollm2", include_usage};
}

// Two tokens, "He" and "llo", with alternatives.
std::vector<TokenLogprob> two_tokens() {
  return {{"He", -0.5f, {{"He", -0.5f}, {"Hi", -1.25f}}},
          {"llo", -0.25f, {{"llo", -0.25f}, {"y", -2.0f}}}};
}

TEST(OpenAiResponse, Completion) {
  const std::vector<ChoiceResult> choices = {{0, "Hello", FinishReason::Stop, std::nullopt},
                                             {1, "Hey there", FinishReason::Length, std::nullopt}};
  const json j = json::parse(completion_response(header(), choices, {12, 7, 4}));
  EXPECT_EQ(j["id"], "cmpl-abc");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "smollm2");
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "Hey there");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 12);
  EXPECT_EQ(j["usage"]["completion_tokens"], 7);
  EXPECT_EQ(j["usage"]["total_tokens"], 19);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST(OpenAiResponse, CompletionLogprobs) {
  const std::vector<ChoiceResult> choices = {{0, "Hello", FinishReason::Stop, two_tokens()}};
  const json lp = json::parse(completion_response(header(), choices, {}))["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"He", "llo"}));
  EXPECT_EQ(lp["token_logprobs"], json({-0.5, -0.25}));
  EXPECT_EQ(lp["top_logprobs"][0], json({{"He", -0.5}, {"Hi", -1.25}}));
  EXPECT_EQ(lp["top_logprobs"][1], json({{"llo", -0.25}, {"y", -2.0}}));
  EXPECT_EQ(lp["text_offset"], json({0, 2}));
}

TEST(OpenAiResponse, LogprobsWithNoTokensAreEmptyNotNull) {
  const std::vector<ChoiceResult> choices = {
      {0, "", FinishReason::Length, std::vector<TokenLogprob>{}}};
  const json lp = json::parse(completion_response(header(), choices, {}))["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object());
  EXPECT_TRUE(lp["tokens"].empty());
}

TEST(OpenAiResponse, Chat) {
  ResponseHeader h = header();
  h.id = "chatcmpl-xyz";
  const std::vector<ChoiceResult> choices = {{0, "Four.", FinishReason::Length, two_tokens()}};
  const json j = json::parse(chat_response(h, choices, {20, 2, 0}));
  EXPECT_EQ(j["id"], "chatcmpl-xyz");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "smollm2");
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "Four.");
  EXPECT_EQ(c["finish_reason"], "length");
  const json& first = c["logprobs"]["content"][0];
  EXPECT_EQ(first["token"], "He");
  EXPECT_EQ(first["logprob"], -0.5);
  EXPECT_EQ(first["bytes"], json({72, 101}));
  ASSERT_EQ(first["top_logprobs"].size(), 2u);
  EXPECT_EQ(first["top_logprobs"][1]["token"], "Hi");
  EXPECT_EQ(first["top_logprobs"][1]["logprob"], -1.25);
  EXPECT_EQ(first["top_logprobs"][1]["bytes"], json({72, 105}));
  EXPECT_EQ(c["logprobs"]["content"][1]["token"], "llo");
  EXPECT_EQ(j["usage"]["total_tokens"], 22);
}

TEST(OpenAiResponse, ChatWithoutLogprobsHasNull) {
  const std::vector<ChoiceResult> choices = {{0, "x", FinishReason::Stop, std::nullopt}};
  EXPECT_TRUE(
      json::parse(chat_response(header(), choices, {}))["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiResponse, BrokenUtf8AndInfiniteLogprobs) {
  // A token ending inside "é" (C3 A9), and a token the distribution excluded (-inf).
  const std::vector<TokenLogprob> lps = {{"caf\xC3", -INFINITY, {}}};
  const std::vector<ChoiceResult> choices = {{0, "caf\xC3", FinishReason::Stop, lps}};
  const json chat = json::parse(chat_response(header(), choices, {}));
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "caf\xEF\xBF\xBD");  // U+FFFD
  const json& t = chat["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(t["token"], "caf\xEF\xBF\xBD");
  EXPECT_EQ(t["bytes"], json({99, 97, 102, 0xC3}));
  EXPECT_EQ(t["logprob"], -9999.0);
  const json comp = json::parse(completion_response(header(), choices, {}));
  EXPECT_EQ(comp["choices"][0]["logprobs"]["token_logprobs"][0], -9999.0);
}

TEST(OpenAiStream, CompletionChunks) {
  ChoiceDelta d{1, "llo", std::nullopt, std::vector<TokenLogprob>{two_tokens()[1]}, 2};
  json j = json::parse(completion_chunk(header(), d));
  EXPECT_EQ(j["id"], "cmpl-abc");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "smollm2");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 1);
  EXPECT_EQ(j["choices"][0]["text"], "llo");
  ASSERT_TRUE(j["choices"][0].contains("finish_reason"));
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], json({2}));
  EXPECT_FALSE(j.contains("usage"));

  d = {0, "", FinishReason::Length, std::nullopt, 5};
  j = json::parse(completion_chunk(header(/*include_usage=*/true), d));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  ASSERT_TRUE(j.contains("usage"));
  EXPECT_TRUE(j["usage"].is_null());
}

TEST(OpenAiStream, ChatChunks) {
  ResponseHeader h = header(/*include_usage=*/true);
  h.id = "chatcmpl-1";
  json j = json::parse(chat_role_chunk(h, 0));
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(j["usage"].is_null());

  j = json::parse(chat_chunk(h, {0, "Hel", std::nullopt, std::nullopt, 0}));
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["delta"], json({{"content", "Hel"}}));
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());

  j = json::parse(chat_chunk(h, {1, "lo", std::nullopt, two_tokens(), 0}));
  EXPECT_EQ(j["choices"][0]["index"], 1);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"].size(), 2u);

  j = json::parse(chat_chunk(h, {0, "", FinishReason::Stop, std::nullopt, 0}));
  EXPECT_EQ(j["choices"][0]["delta"], json::object());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");

  j = json::parse(chat_chunk(h, {0, "!", FinishReason::Length, std::nullopt, 0}));
  EXPECT_EQ(j["choices"][0]["delta"], json({{"content", "!"}}));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

TEST(OpenAiStream, UsageChunk) {
  json j = json::parse(usage_chunk(header(true), RequestKind::Chat, {10, 3, 8}));
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"], json::array());
  EXPECT_EQ(j["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 13);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  j = json::parse(usage_chunk(header(true), RequestKind::Completion, {1, 1, 0}));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["usage"]["total_tokens"], 2);
}

TEST(OpenAiStream, SseFraming) {
  EXPECT_EQ(sse_event(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // Newlines in generated text stay escaped: one event, one line.
  const std::string e =
      sse_event(chat_chunk(header(), {0, "a\nb\n\n", std::nullopt, std::nullopt, 0}));
  EXPECT_EQ(e.find('\n'), e.size() - 2);
  EXPECT_TRUE(e.starts_with("data: {"));
  EXPECT_EQ(json::parse(e.substr(6))["choices"][0]["delta"]["content"], "a\nb\n\n");
}

TEST(OpenAiResponse, ErrorBody) {
  json j = json::parse(error_body(ApiError(400, "'n' must be ...", "n")));
  EXPECT_EQ(j["error"]["message"], "'n' must be ...");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "n");
  ASSERT_TRUE(j["error"].contains("code"));
  EXPECT_TRUE(j["error"]["code"].is_null());
  j = json::parse(error_body(ApiError(401, "bad key", "", "invalid_api_key")));
  EXPECT_EQ(j["error"]["type"], "authentication_error");
  ASSERT_TRUE(j["error"].contains("param"));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "invalid_api_key");
}

TEST(OpenAiResponse, ErrorBodyOfARefusedRequestIsJson) {
  // The parser's message quotes the bytes it stopped at: here half a UTF-8 character.
  for (const char* body : {"{\"prompt\": \"caf\xC3\"}", "{\"prompt\": \"a\", \"stop\": \"\xC3"}) {
    SCOPED_TRACE(body);
    try {
      (void)parse_request(body, RequestKind::Completion);
      FAIL() << "accepted";
    } catch (const ApiError& e) {
      const json j = json::parse(error_body(e));
      EXPECT_EQ(j["error"]["type"], "invalid_request_error");
      EXPECT_TRUE(
          j["error"]["message"].get<std::string>().starts_with("the body is not valid JSON"));
    }
  }
}

TEST(OpenAiResponse, ModelsList) {
  const json j = json::parse(models_list("SmolLM2-135M-Instruct.Q4_1", 1700000001));
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["created"], 1700000001);
  EXPECT_EQ(j["data"][0]["owned_by"], "squeeze");
}

}  // namespace
}  // namespace squeeze::serve
