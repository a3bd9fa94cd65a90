#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "tokenizer/jinja.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::tokenizer {
namespace {

// Gemma's turns, for gemma files without a template: a system message opens the first user
// turn followed by a blank line; the assistant's turns are "model"; contents are trimmed.
constexpr std::string_view kGemma =
    "{{ bos_token }}"
    "{%- set first = 1 if messages and messages[0]['role'] == 'system' else 0 -%}"
    "{%- for message in messages[first:] -%}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if loop.first and first %}{{ messages[0]['content'] | trim }}\n\n{% endif -%}"
    "{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endfor -%}"
    "{%- if add_generation_prompt %}<start_of_turn>model\n{% endif -%}";

}  // namespace

ChatTemplate::ChatTemplate(std::string_view jinja, std::string bos_token, std::string eos_token,
                           bool strip_bos)
    : bos_(std::move(bos_token)), eos_(std::move(eos_token)), strip_bos_(strip_bos) {
  if (jinja.empty()) throw Error("the model has no chat template (tokenizer.chat_template)");
  try {
    template_ = std::make_unique<jinja::Template>(jinja);
  } catch (const Error& e) {
    throw Error(std::string("the model's chat template cannot be used: ") + e.what());
  }
}

ChatTemplate ChatTemplate::for_model(const VocabData& vocab, std::string_view arch) {
  const auto text = [&](Token t) {
    return t >= 0 && static_cast<size_t>(t) < vocab.tokens.size() ? vocab.tokens[static_cast<size_t>(t)] : std::string();
  };
  if (vocab.chat_template.empty() && arch.starts_with("gemma")) {
    ChatTemplate t(kGemma, text(vocab.bos), text(vocab.eos), vocab.add_bos);
    t.origin_ = "built-in gemma";
    return t;
  }
  return ChatTemplate(vocab.chat_template, text(vocab.bos), text(vocab.eos), vocab.add_bos);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                std::time_t now) const {
  jinja::Value::List list;
  for (const ChatMessage& m : messages) {
    list.push_back(jinja::Value::dict({{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}}));
  }
  const jinja::Value::Dict vars = {
      {"messages", jinja::Value::list(std::move(list))},
      {"add_generation_prompt", jinja::Value(add_generation_prompt)},
      {"bos_token", jinja::Value(bos_)},
      {"eos_token", jinja::Value(eos_)},
      {"tools", jinja::Value::none()},
      {"documents", jinja::Value::none()},
  };
  std::string out = template_->render(vars, now != 0 ? now : std::time(nullptr));
  if (strip_bos_ && !bos_.empty() && out.starts_with(bos_)) out.erase(0, bos_.size());
  return out;
}

}  // namespace squeeze::tokenizer
