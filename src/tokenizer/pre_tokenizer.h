// Pre-tokenization (internal header): splits text into the words that BPE merges stay within,
// following the regex list llama.cpp uses for each tokenizer.ggml.pre.
//
// As in llama.cpp, the first regex splits the text, each next regex splits every piece again,
// and the text between matches is kept as a piece of its own. The regexes run on PCRE2 (UTF mode,
// JIT), with \s, \p{L}, \p{N} and \p{P} widened to llama.cpp's character data (see
// pre_tokenizer.cpp), so words come out as llama.cpp's hand-written splitters make them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace squeeze::tokenizer {

class PreTokenizer {
 public:
  // `pre` is tokenizer.ggml.pre ("" means "default", as in llama.cpp). Throws FormatError
  // naming the supported values when `pre` is not one of them.
  explicit PreTokenizer(std::string_view pre);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Appends the words of `text`. Any bytes are accepted: invalid UTF-8 is first replaced by
  // U+FFFD the way llama.cpp decodes it, so the words are always valid UTF-8 (bar surrogates).
  void split(std::string_view text, std::vector<std::string>& words) const;

  // llama3-style vocabs: a word that is itself a token is emitted whole, skipping the merges.
  bool ignore_merges() const { return ignore_merges_; }
  // Whether llama.cpp adds BOS by default for this pre-tokenizer (before tokenizer.ggml.add_bos_token).
  bool default_add_bos() const { return default_add_bos_; }

  // The tokenizer.ggml.pre values squeeze knows, for error messages.
  static std::string supported_names();
  // default_add_bos() for `pre` without building the regexes; false for an unknown name.
  static bool default_add_bos_for(std::string_view pre);

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> stages_;
  bool ignore_merges_ = false;
  bool default_add_bos_ = false;
};

}  // namespace squeeze::tokenizer
