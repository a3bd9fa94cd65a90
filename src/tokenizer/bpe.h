// Byte-pair merging of one pre-tokenized word (internal header).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace squeeze::tokenizer {

// Hash for unordered maps keyed by std::string that are looked up with std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, Token, StringHash, std::equal_to<>>;

class BpeMerges {
 public:
  // `merges` are "left right" (split at the first space after the first byte, as llama.cpp does),
  // ranked by their order; a repeated pair keeps its first rank.
  explicit BpeMerges(const std::vector<std::string>& merges);

  // Merges the byte-level text `word` (symbols start as its UTF-8 characters): repeatedly the
  // adjacent pair with the lowest rank, leftmost first, until no ranked pair is left. Each final
  // symbol is looked up in `vocab`; one that is not a token falls back to its single bytes
  // (those that are tokens), as llama.cpp does: byte-level texts, or with hex_bytes the
  // SentencePiece-style byte tokens "<0xAB>" (gemma4's BPE on raw UTF-8).
  void merge_word(std::string_view word, const TokenMap& vocab, std::vector<Token>& out,
                  bool hex_bytes = false) const;

  size_t size() const { return ranks_.size(); }

 private:
  static void make_key(std::string_view left, std::string_view right, std::string& key);
  int32_t rank(std::string_view left, std::string_view right, std::string& key) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ranks_;  // key -> rank
};

}  // namespace squeeze::tokenizer
