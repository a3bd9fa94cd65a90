// ChatTemplate on SmolLM2's and Gemma's templates against their jinja2 renderings; BOS handling;
// the built-in Gemma template; errors. (Every real template: jinja_fixture_test.cpp.)
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::tokenizer {
namespace {

// tokenizer.chat_template of SmolLM2-135M-Instruct (its newlines are real newlines).
constexpr std::string_view kSmolLm2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

constexpr std::string_view kSmolSystem =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";

ChatTemplate smollm2() { return ChatTemplate(kSmolLm2, "<|im_start|>", "<|im_end|>", false); }

TEST(ChatTemplate, SmolLm2AddsItsDefaultSystemMessage) {
  const ChatTemplate t = smollm2();
  EXPECT_EQ(t.apply({{"user", "Hi there"}}, true),
            std::string(kSmolSystem) + "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, SmolLm2KeepsAGivenSystemMessage) {
  const ChatTemplate t = smollm2();
  EXPECT_EQ(t.apply({{"system", "Be brief."}, {"user", "Hi"}}, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, SmolLm2MultiTurnWithoutGenerationPrompt) {
  const ChatTemplate t = smollm2();
  EXPECT_EQ(t.apply({{"user", "Hi"}, {"assistant", "Hello! How can I help?"}, {"user", "Tell me a joke."}}, false),
            std::string(kSmolSystem) +
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
                "<|im_start|>user\nTell me a joke.<|im_end|>\n");
  // The template writes its system message inside the loop: nothing for no messages.
  EXPECT_EQ(t.apply({}, true), "<|im_start|>assistant\n");
}

// Gemma 2's template (llama.cpp's models/templates/google-gemma-2-2b-it.jinja); the expected
// strings are its jinja2 renderings without the leading <bos>, which squeeze's tokenizer adds.
constexpr std::string_view kGemma2 =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% "
    "set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
    "'<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor "
    "%}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

TEST(ChatTemplate, GemmaTurnsAsJinjaRendersThemWithoutTheBosTheTokenizerAdds) {
  const ChatTemplate t(kGemma2, "<bos>", "<eos>", /*strip_bos=*/true);
  EXPECT_EQ(t.apply({{"user", "Hi there"}}, true),
            "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(t.apply({{"user", " Hi \n"}, {"assistant", "Hello!"}, {"user", "Bye"}}, true),
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  // A vocabulary that does not add BOS keeps the template's.
  const ChatTemplate keep(kGemma2, "<bos>", "<eos>", /*strip_bos=*/false);
  EXPECT_EQ(keep.apply({{"user", "Hi"}}, false), "<bos><start_of_turn>user\nHi<end_of_turn>\n");
}

TEST(ChatTemplate, TemplateRefusalIsAnErrorWithItsMessage) {
  const ChatTemplate t(kGemma2, "<bos>", "<eos>", true);
  try {
    (void)t.apply({{"system", "Be brief."}, {"user", "Hi"}}, true);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("System role not supported"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)t.apply({{"user", "a"}, {"user", "b"}}, true), Error);
}

// Gemma 3's template puts a system message before the first user message, then a blank line.
TEST(ChatTemplate, GemmaSystemMessageOpensTheFirstUserTurn) {
  VocabData v;
  v.tokens = {"<pad>", "<eos>", "<bos>"};
  v.bos = 2;
  v.eos = 1;
  v.add_bos = true;
  const ChatTemplate t = ChatTemplate::for_model(v, "gemma3");
  EXPECT_EQ(t.origin(), "built-in gemma");
  EXPECT_EQ(t.apply({{"system", "Be brief. "}, {"user", "Hi"}, {"assistant", " Hello "}, {"user", "Bye"}}, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(t.apply({{"user", "Hi"}}, false), "<start_of_turn>user\nHi<end_of_turn>\n");
  // Other architectures without a template still get the clear error.
  EXPECT_THROW(ChatTemplate::for_model(v, "llama"), Error);
}

TEST(ChatTemplate, BadOrEmptyTemplateIsAClearError) {
  for (const std::string jinja : {"", "{% if x %}unclosed", "{{ 1 + }}", "{% generation %}x{% endgeneration %}"}) {
    try {
      ChatTemplate(jinja, "<s>", "</s>", true);
      FAIL() << "expected Error for '" << jinja << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("chat template"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace squeeze::tokenizer
