// The tokenizer of the default model (SmolLM2-135M-Instruct) against llama.cpp: token ids of every
// string in tests/data/tokenizer_smollm2.json (tools/fixtures_tokenizer.py), decode round trips,
// end-of-generation tokens and the chat prompt. Skipped when the model file is missing (a
// failure under CI=true: require_file.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "require_file.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::tokenizer {
namespace {

const std::string kModel = squeeze::testing::default_model();
const std::string kFixture = squeeze::testing::data_file("tokenizer_smollm2.json");
const std::string kForwardFixture = squeeze::testing::data_file("forward_smollm2.json");

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::string shown(const std::string& s) { return nlohmann::json(s).dump(); }

class SmolLm2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModel) || !std::filesystem::exists(kFixture)) return;
    tok_ = std::make_unique<Tokenizer>(read_vocab(gguf::File::open(kModel)));
    fixture_ = load_json(kFixture);
  }
  static void TearDownTestSuite() { tok_.reset(); }
  void SetUp() override {
    SQUEEZE_REQUIRE_FILE(kModel);
    SQUEEZE_REQUIRE_FILE(kFixture);
  }

  static std::unique_ptr<Tokenizer> tok_;
  static nlohmann::json fixture_;
};
std::unique_ptr<Tokenizer> SmolLm2Tokenizer::tok_;
nlohmann::json SmolLm2Tokenizer::fixture_;

TEST_F(SmolLm2Tokenizer, VocabMetadata) {
  const VocabData& v = tok_->vocab();
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "smollm");
  EXPECT_EQ(tok_->n_vocab(), 49152);
  EXPECT_EQ(v.merges.size(), 48900u);
  EXPECT_EQ(tok_->bos(), 1);
  EXPECT_EQ(tok_->eos(), 2);
  EXPECT_FALSE(v.add_bos);
  EXPECT_FALSE(v.add_eos);
  EXPECT_EQ(v.types[1], TokenType::Control);
  EXPECT_EQ(v.tokens[1], "<|im_start|>");
}

TEST_F(SmolLm2Tokenizer, IdsEqualLlamaCpp) {
  const auto& cases = fixture_.at("cases");
  ASSERT_GE(cases.size(), 200u);
  size_t n_bad = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    const std::vector<Token> want = c.at("ids");
    const std::vector<Token> got = tok_->encode(text, false, c.at("parse_special"));
    if (got != want) {
      ++n_bad;
      ADD_FAILURE() << "text " << shown(text) << "\n  llama.cpp " << nlohmann::json(want).dump()
                    << "\n  squeeze   " << nlohmann::json(got).dump();
    }
  }
  EXPECT_EQ(n_bad, 0u) << "of " << cases.size() << " strings";
}

TEST_F(SmolLm2Tokenizer, DecodeInvertsEncode) {
  for (const auto& c : fixture_.at("cases")) {
    const std::string text = c.at("text");
    const bool parse_special = c.at("parse_special");
    const std::vector<Token> ids = tok_->encode(text, false, parse_special);
    EXPECT_EQ(tok_->decode(ids, /*render_special=*/true), text) << shown(text);

    StreamDecoder stream(*tok_, /*render_special=*/true);
    std::string streamed;
    for (Token t : ids) streamed += stream.push(t);
    streamed += stream.flush();
    EXPECT_EQ(streamed, text) << shown(text);
  }
}

TEST_F(SmolLm2Tokenizer, EndOfGenerationEqualsLlamaCpp) {
  const std::vector<Token> want = fixture_.at("meta").at("eog_ids");
  std::vector<Token> got;
  for (Token t = 0; t < tok_->n_vocab(); ++t) {
    if (tok_->is_eog(t)) got.push_back(t);
  }
  EXPECT_EQ(got, want);  // <|endoftext|>, <|im_end|> and, as llama.cpp has it, <reponame>
}

TEST_F(SmolLm2Tokenizer, ChatPromptFromTheModelTemplate) {
  const ChatTemplate chat = ChatTemplate::for_model(tok_->vocab(), "llama");
  const std::string prompt = chat.apply({{"user", "What are three tips for staying healthy?"}}, true);
  EXPECT_EQ(prompt,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
            "<|im_end|>\n<|im_start|>user\nWhat are three tips for staying healthy?<|im_end|>\n"
            "<|im_start|>assistant\n");
  SQUEEZE_REQUIRE_FILE(kForwardFixture);
  // The same prompt in the forward-pass fixture, tokenized there by llama.cpp.
  const nlohmann::json forward = load_json(kForwardFixture);
  for (const auto& c : forward.at("cases")) {
    if (c.at("prompt").get<std::string>() != prompt) continue;
    EXPECT_EQ(tok_->encode(prompt, false, true), c.at("prompt_ids").get<std::vector<Token>>());
    return;
  }
  ADD_FAILURE() << "chat prompt not found in " << kForwardFixture;
}

TEST_F(SmolLm2Tokenizer, ForwardFixturePromptsEqualLlamaCpp) {
  SQUEEZE_REQUIRE_FILE(kForwardFixture);
  const nlohmann::json forward = load_json(kForwardFixture);
  for (const auto& c : forward.at("cases")) {
    const std::string prompt = c.at("prompt");
    EXPECT_EQ(tok_->encode(prompt, false, true), c.at("prompt_ids").get<std::vector<Token>>())
        << shown(prompt);
  }
}

}  // namespace
}  // namespace squeeze::tokenizer
