#include "tokenizer/chat_template.h"

#include "core/error.h"

namespace squeeze::tokenizer {
namespace {

constexpr std::string_view kSupported =
    "chatml (<|im_start|>role ... <|im_end|>), gemma (<start_of_turn>role ... <end_of_turn>)";

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

// The system message a ChatML template writes itself: a literal
// '<|im_start|>system\n...<|im_end|>' whose text has no Jinja or string syntax in it
// (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging Face").
// The newline may be a real one or the two characters \n of a Jinja string literal.
std::string find_default_system(std::string_view jinja) {
  constexpr std::string_view kHeader = "<|im_start|>system";
  constexpr std::string_view kEnd = "<|im_end|>";
  for (size_t at = jinja.find(kHeader); at != std::string_view::npos; at = jinja.find(kHeader, at + 1)) {
    std::string_view rest = jinja.substr(at + kHeader.size());
    if (rest.starts_with("\n")) {
      rest.remove_prefix(1);
    } else if (rest.starts_with("\\n")) {
      rest.remove_prefix(2);
    } else {
      continue;
    }
    const size_t end = rest.find(kEnd);
    if (end == std::string_view::npos || end == 0) continue;
    const std::string_view text = rest.substr(0, end);
    if (text.find_first_of("'\"{}") != std::string_view::npos) continue;  // not a plain literal
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == 'n') {
        out += '\n';
        ++i;
      } else {
        out += text[i];
      }
    }
    return out;
  }
  return {};
}

}  // namespace

ChatTemplate ChatTemplate::from_jinja(std::string_view jinja) {
  if (jinja.empty()) {
    throw Error("the model has no chat template (tokenizer.chat_template); squeeze supports: " +
                std::string(kSupported));
  }
  ChatTemplate t;
  if (jinja.find("<|im_start|>") != std::string_view::npos) {
    t.family_ = "chatml";
    t.default_system_ = find_default_system(jinja);
    return t;
  }
  if (jinja.find("<start_of_turn>") != std::string_view::npos) {
    t.family_ = "gemma";
    return t;
  }
  constexpr size_t kShown = 60;
  std::string head(jinja.substr(0, kShown));
  for (char& c : head) {
    if (c == '\n') c = ' ';
  }
  throw Error("unrecognised chat template \"" + head + (jinja.size() > kShown ? "...\"" : "\"") +
              "; squeeze renders these template families natively: " + std::string(kSupported));
}

ChatTemplate ChatTemplate::for_model(std::string_view jinja, std::string_view arch) {
  if (jinja.empty() && arch.starts_with("gemma")) {
    ChatTemplate t;
    t.family_ = "gemma";
    return t;
  }
  return from_jinja(jinja);
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  std::string out;
  if (family_ == "gemma") {
    // Gemma's template: the system message (trimmed) opens the first user turn, followed by a
    // blank line; the assistant's turns are "model"; every content is trimmed. BOS comes from
    // the tokenizer.
    std::string prefix;
    size_t first = 0;
    if (!messages.empty() && messages[0].role == "system") {
      prefix = std::string(trim(messages[0].content)) + "\n\n";
      first = 1;
    }
    for (size_t i = first; i < messages.size(); ++i) {
      const std::string role = messages[i].role == "assistant" ? "model" : messages[i].role;
      out += "<start_of_turn>" + role + "\n" + (i == first ? prefix : "") +
             std::string(trim(messages[i].content)) + "<end_of_turn>\n";
    }
    if (add_generation_prompt) out += "<start_of_turn>model\n";
    return out;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0 && !default_system_.empty() && messages[0].role != "system") {
      out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
    }
    out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace squeeze::tokenizer
