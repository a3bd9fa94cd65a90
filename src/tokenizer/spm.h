// SentencePiece-style merging by token score (internal header): llama.cpp's SPM tokenizer,
// used by vocabs with tokenizer.ggml.model = "llama" (Llama 2, Mistral, TinyLlama, Gemma).
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::tokenizer {

// Spaces as SentencePiece writes them in token texts: U+2581 (▁).
inline constexpr std::string_view kSpmSpace = "\xe2\x96\x81";

class SpmMerges {
 public:
  // scores: id -> score (the higher, the earlier two symbols merge into it); byte tokens
  // ("<0xAB>") are found by text.
  SpmMerges(const std::vector<std::string>& tokens, const std::vector<float>& scores);

  // Tokenizes `text` (spaces already written as kSpmSpace): symbols start as its UTF-8
  // characters; repeatedly the adjacent pair whose concatenation is the token of the highest
  // score (leftmost on ties) merges, until no pair is a token. A final symbol that is not a
  // token splits back into the pair it was made of, down to single characters, whose bytes
  // become byte tokens (llama.cpp's resegment).
  void encode(std::string_view text, const TokenMap& vocab, std::vector<Token>& out) const;

 private:
  std::vector<float> scores_;
  std::array<Token, 256> byte_token_{};  // -1: the vocab has no token for the byte
};

// Writes every space of `text` as kSpmSpace; and back.
std::string spm_escape(std::string_view text);
std::string spm_unescape(std::string_view text);

}  // namespace squeeze::tokenizer
