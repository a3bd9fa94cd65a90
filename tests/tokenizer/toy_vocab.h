// A small byte-level BPE vocab built by hand, for tests that can be checked by eye.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace squeeze::tokenizer::testing {

// Byte-level text of raw bytes ("hi there" -> "hiĠthere").
inline std::string bl(std::string_view bytes) {
  std::string out;
  ByteLevel::get().encode(bytes, out);
  return out;
}

// Ids 0..255: the byte-level alphabet in byte order, so a byte's token id is the byte itself.
// Then `extra` tokens (byte-level text) of the given types, and `merges` ("a b", byte-level).
struct ToyVocab {
  VocabData data;

  explicit ToyVocab(std::string pre = "gpt-2") {
    data.model = "gpt2";
    data.pre = std::move(pre);
    for (int b = 0; b < 256; ++b) add(bl(std::string(1, static_cast<char>(b))));
  }

  Token add(std::string text, TokenType type = TokenType::Normal) {
    data.tokens.push_back(std::move(text));
    data.types.push_back(type);
    return static_cast<Token>(data.tokens.size() - 1);
  }

  ToyVocab& merge(std::string left, std::string right) {
    data.merges.push_back(left + " " + right);
    return *this;
  }
};

}  // namespace squeeze::tokenizer::testing
