// squeeze's Jinja engine against Python jinja2 on llama.cpp's real chat templates
// (models/templates/*.jinja, cached by scripts/fetch_vocab_tests.sh from the pinned
// llama-cpp-python sdist): tests/data/chat_templates.json holds jinja2's rendering of every
// template for four conversations, with and without the generation prompt
// (tools/make_chat_fixtures.py). Every rendering must be jinja2's exactly; where jinja2 raises
// (raise_exception, an error of the template), squeeze must raise too. No template may give a
// different prompt; every template of kRequired must render.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "core/error.h"
#include "require_file.h"
#include "tokenizer/jinja.h"

namespace squeeze::jinja {
namespace {

// 2026-01-01 12:00 local time, the fixture's strftime_now.
std::time_t fixture_now() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 1;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

Value from_json(const nlohmann::ordered_json& j) {
  if (j.is_null()) return Value::none();
  if (j.is_boolean()) return Value(j.get<bool>());
  if (j.is_number_integer()) return Value(j.get<int64_t>());
  if (j.is_number()) return Value(j.get<double>());
  if (j.is_string()) return Value(j.get<std::string>());
  if (j.is_array()) {
    Value::List items;
    for (const auto& x : j) items.push_back(from_json(x));
    return Value::list(std::move(items));
  }
  Value::Dict items;
  for (const auto& [k, x] : j.items()) items.emplace_back(k, from_json(x));
  return Value::dict(std::move(items));
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The templates of the model families squeeze runs (and their relatives): these must render.
const std::set<std::string> kRequired = {
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "Qwen-QwQ-32B.jinja",
    "HuggingFaceTB-SmolLM3-3B.jinja",
    "google-gemma-2-2b-it.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
};

TEST(JinjaFixture, RealTemplatesRenderExactlyAsJinja2OrRefuse) {
  const std::string fixture = squeeze::testing::data_file("chat_templates.json");
  SQUEEZE_REQUIRE_FILE(fixture);
  const auto j = nlohmann::ordered_json::parse(read_all(fixture));
  std::vector<Value> conversations;
  for (const auto& c : j.at("conversations")) conversations.push_back(from_json(c));
  const std::time_t now = fixture_now();
  int rendered = 0;
  int refused = 0;
  std::set<std::string> seen;
  for (const auto& t : j.at("templates")) {
    const std::string name = t.at("name");
    seen.insert(name);
    const std::string path = squeeze::testing::model_file("templates/" + name);
    SQUEEZE_REQUIRE_FILE(path);
    const bool required = kRequired.count(name) > 0;
    std::unique_ptr<Template> tmpl;
    try {
      tmpl = std::make_unique<Template>(read_all(path));
    } catch (const Error& e) {
      EXPECT_FALSE(required) << name << ": " << e.what();
      ++refused;
      std::cout << "refused " << name << ": " << e.what() << "\n";
      continue;
    }
    for (const auto& c : t.at("cases")) {
      const Value::Dict vars = {
          {"messages", conversations.at(c.at("conversation").get<size_t>())},
          {"add_generation_prompt", Value(c.at("add_generation_prompt").get<bool>())},
          {"bos_token", Value(j.at("bos_token").get<std::string>())},
          {"eos_token", Value(j.at("eos_token").get<std::string>())},
          {"tools", Value::none()},
          {"documents", Value::none()},
      };
      const std::string where = name + " conversation " + std::to_string(c.at("conversation").get<int>()) +
                                (c.at("add_generation_prompt").get<bool>() ? " +gen" : "");
      if (c.contains("error")) {
        EXPECT_THROW((void)tmpl->render(vars, now), Error) << where << ": jinja2 raised " << c.at("error");
        continue;
      }
      try {
        EXPECT_EQ(tmpl->render(vars, now), c.at("text").get<std::string>()) << where;
        ++rendered;
      } catch (const Error& e) {
        EXPECT_FALSE(required) << where << ": " << e.what();
        ++refused;
        std::cout << "refused " << where << ": " << e.what() << "\n";
      }
    }
  }
  for (const auto& r : kRequired) EXPECT_TRUE(seen.count(r)) << r << " is not in the fixture";
  std::cout << rendered << " renderings equal to jinja2's, " << refused << " refused\n";
}

// Small templates over the engine's corners (scoping, operators, printing, whitespace control,
// filters, tests, methods, errors), each rendered by jinja2 in the same fixture.
TEST(JinjaFixture, SnippetsRenderExactlyAsJinja2) {
  const std::string fixture = squeeze::testing::data_file("chat_templates.json");
  SQUEEZE_REQUIRE_FILE(fixture);
  const auto j = nlohmann::ordered_json::parse(read_all(fixture));
  const Value::Dict vars = {{"messages", from_json(j.at("conversations").at(2))}, {"data", from_json(j.at("data"))}};
  ASSERT_GE(j.at("snippets").size(), 40u);
  for (const auto& c : j.at("snippets")) {
    const std::string source = c.at("source");
    if (c.contains("error")) {
      EXPECT_THROW((void)Template(source).render(vars, fixture_now()), Error)
          << source << "\njinja2 raised " << c.at("error");
      continue;
    }
    try {
      EXPECT_EQ(Template(source).render(vars, fixture_now()), c.at("text").get<std::string>()) << source;
    } catch (const Error& e) {
      ADD_FAILURE() << source << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace squeeze::jinja
