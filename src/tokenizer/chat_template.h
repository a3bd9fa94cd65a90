// Chat templates: the model file's own tokenizer.chat_template, rendered by squeeze's Jinja
// engine (tokenizer/jinja.h) as Hugging Face's apply_chat_template renders it with Python jinja2.
// A file without a template gets its architecture's built-in one where the family has one
// (gemma*: Gemma's turns), as llama.cpp picks a template by model name.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace squeeze::jinja {
class Template;
}

namespace squeeze::tokenizer {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

struct VocabData;

class ChatTemplate {
 public:
  // Parses `jinja` (Error for an empty template, a syntax error or an unsupported tag).
  // bos_token / eos_token are the texts the template sees. With strip_bos (the tokenizer adds
  // BOS itself) a rendering that starts with bos_token loses it, as in llama.cpp, so that the
  // prompt does not get two.
  ChatTemplate(std::string_view jinja, std::string bos_token, std::string eos_token, bool strip_bos);
  // The vocabulary's template with its BOS / EOS texts; a vocabulary without a template gets
  // the architecture's built-in one (gemma*) or an Error.
  static ChatTemplate for_model(const VocabData& vocab, std::string_view arch);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // "the model's" or "built-in <family>": where the template came from, for messages.
  std::string_view origin() const { return origin_; }

  // Renders messages; with add_generation_prompt the assistant's header is appended.
  // strftime_now() sees `now` (0: the current time). Throws Error when the template refuses
  // the messages (raise_exception: e.g. roles that do not alternate) or fails.
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                    std::time_t now = 0) const;

 private:
  std::unique_ptr<jinja::Template> template_;
  std::string bos_;
  std::string eos_;
  bool strip_bos_;
  std::string origin_ = "the model's";
};

}  // namespace squeeze::tokenizer
