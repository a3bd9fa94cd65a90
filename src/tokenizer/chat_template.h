// Chat templates. squeeze does not run Jinja: it recognises template families by their
// markers and renders them natively. Supported: ChatML (<|im_start|>role\n...<|im_end|>\n),
// including a default system message written into the template (as SmolLM2-Instruct does), and
// Gemma's turns (<start_of_turn>user\n...<end_of_turn>\n, the assistant's role written "model",
// a system message put before the first user message).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace squeeze::tokenizer {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  // Recognises the family from the template text; throws Error naming the supported families
  // if it is not recognised. An empty template is an error as well.
  static ChatTemplate from_jinja(std::string_view jinja);
  // The same, except that a file without a template gets its architecture's own format where
  // the family has one (gemma*: Gemma's turns), as llama.cpp picks a template by model name.
  static ChatTemplate for_model(std::string_view jinja, std::string_view arch);

  std::string_view family() const { return family_; }
  // The system message the template writes when messages[0] is not a system message ("" if none).
  std::string_view default_system() const { return default_system_; }
  // Renders messages; with add_generation_prompt the assistant header is appended.
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

 private:
  std::string family_;
  std::string default_system_;  // written by the template when no system message is given
};

}  // namespace squeeze::tokenizer
