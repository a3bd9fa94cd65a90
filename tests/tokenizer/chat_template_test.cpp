// ChatML rendering against the strings the real Jinja templates produce (rendered with jinja2).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "core/error.h"

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

TEST(ChatTemplate, SmolLm2AddsItsDefaultSystemMessage) {
  const ChatTemplate t = ChatTemplate::from_jinja(kSmolLm2);
  EXPECT_EQ(t.family(), "chatml");
  EXPECT_EQ(t.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(t.apply({{"user", "Hi there"}}, true),
            std::string(kSmolSystem) + "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, SmolLm2KeepsAGivenSystemMessage) {
  const ChatTemplate t = ChatTemplate::from_jinja(kSmolLm2);
  EXPECT_EQ(t.apply({{"system", "Be brief."}, {"user", "Hi"}}, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, SmolLm2MultiTurnWithoutGenerationPrompt) {
  const ChatTemplate t = ChatTemplate::from_jinja(kSmolLm2);
  EXPECT_EQ(t.apply({{"user", "Hi"}, {"assistant", "Hello! How can I help?"}, {"user", "Tell me a joke."}}, false),
            std::string(kSmolSystem) +
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
                "<|im_start|>user\nTell me a joke.<|im_end|>\n");
  // The template writes its system message inside the loop: nothing for no messages.
  EXPECT_EQ(t.apply({}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplate, DefaultSystemWithEscapedNewlines) {
  // Qwen2.5 style: the literal is written with \n escapes inside the Jinja string.
  const std::string qwen =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
      "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
      "You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}";
  const ChatTemplate t = ChatTemplate::from_jinja(qwen);
  EXPECT_EQ(t.default_system(), "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
}

TEST(ChatTemplate, PlainChatMlHasNoDefaultSystem) {
  const ChatTemplate t = ChatTemplate::from_jinja(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n'}}{% endfor %}");
  EXPECT_EQ(t.default_system(), "");
  EXPECT_EQ(t.apply({{"user", "x"}}, false), "<|im_start|>user\nx<|im_end|>\n");
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

TEST(ChatTemplate, GemmaTurnsAsJinjaRendersThem) {
  const ChatTemplate t = ChatTemplate::from_jinja(kGemma2);
  EXPECT_EQ(t.family(), "gemma");
  EXPECT_EQ(t.apply({{"user", "Hi there"}}, true),
            "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(t.apply({{"user", " Hi \n"}, {"assistant", "Hello!"}, {"user", "Bye"}}, true),
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

// Gemma 3's template puts a system message before the first user message, then a blank line.
TEST(ChatTemplate, GemmaSystemMessageOpensTheFirstUserTurn) {
  const ChatTemplate t = ChatTemplate::for_model("", "gemma3");
  EXPECT_EQ(t.family(), "gemma");
  EXPECT_EQ(t.apply({{"system", "Be brief. "}, {"user", "Hi"}}, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  // Other architectures without a template still get the clear error.
  EXPECT_THROW(ChatTemplate::for_model("", "llama"), Error);
}

TEST(ChatTemplate, UnrecognisedOrEmptyTemplateIsAClearError) {
  const std::string llama3 =
      "{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
      "{{ message['content'] }}<|eot_id|>{% endfor %}";
  for (const std::string& jinja : {llama3, std::string()}) {
    try {
      ChatTemplate::from_jinja(jinja);
      FAIL() << "expected Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("chatml"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace squeeze::tokenizer
