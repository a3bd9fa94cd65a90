// Tokenizer built from GGUF metadata (tokenizer.ggml.*).
//
// Supported now: tokenizer.ggml.model = "gpt2" (byte-level BPE) with the pre-tokenizers named by
// tokenizer.ggml.pre that squeeze knows (at least "smollm", "llama-bpe", "gpt-2", "default"),
// and "llama" (SentencePiece-style merges by score with byte fallback: Llama 2, Mistral, Gemma).
// An unknown model or pre-tokenizer is a clear error, never a silent fallback.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace squeeze::gguf {
class File;
}

namespace squeeze::tokenizer {

using Token = int32_t;

// llama.cpp's token attribute types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

// Everything the tokenizer needs, independent of the file it came from.
struct VocabData {
  std::string model;                  // "gpt2" or "llama" (SentencePiece)
  std::string pre;                    // "smollm", ...
  std::vector<std::string> tokens;    // id -> text (gpt2: byte-level BPE alphabet; llama: ▁ for spaces)
  std::vector<TokenType> types;       // id -> type (Normal if absent)
  std::vector<std::string> merges;    // gpt2: "a b", in priority order
  std::vector<float> scores;          // llama: id -> merge score (0 if absent)
  bool add_space_prefix = false;      // llama: a space before the text (and after a special token)
  Token bos = -1, eos = -1, eot = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
  std::string chat_template;          // tokenizer.chat_template, may be empty
};

// Throws FormatError on missing/bad keys. Defaults follow llama.cpp: gpt2 vocabs without
// BOS/EOS keys get id 11; llama3-style pre-tokenizers add BOS unless the file says otherwise;
// llama (SentencePiece) vocabs have BOS 1, EOS 2, UNK 0, add BOS and a space prefix.
VocabData read_vocab(const gguf::File& file);

class Tokenizer {
 public:
  explicit Tokenizer(VocabData vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;

  // Text to ids. add_special adds BOS/EOS per the vocab flags; parse_special recognises
  // control token texts inside `text` (as llama.cpp's parse_special). As in llama.cpp,
  // user-defined token texts are recognised either way. Any bytes are accepted; invalid UTF-8
  // is read as U+FFFD, like llama.cpp. Thread-safe (const).
  std::vector<Token> encode(std::string_view text, bool add_special, bool parse_special) const;

  // One token's bytes (control tokens render as "" unless `render_special`). Throws Error for
  // an id outside the vocab.
  std::string token_to_piece(Token t, bool render_special = false) const;
  std::string decode(const std::vector<Token>& ids, bool render_special = false) const;

  int32_t n_vocab() const;
  Token bos() const;
  Token eos() const;
  // True for tokens that end generation (EOS, EOT, and other end-of-generation control tokens
  // such as <|im_end|> when present).
  bool is_eog(Token t) const;
  // The vocab as used: tokens llama.cpp treats as end of generation are typed Control, and
  // eot is filled in from the token texts when the file named none.
  const VocabData& vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Streaming decoder: feed tokens, get back only complete UTF-8; incomplete multi-byte
// sequences are held until the next token completes them (or flush() at the end).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false)
      : tok_(tok), render_special_(render_special) {}
  std::string push(Token t);
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool render_special_ = false;
  std::string pending_;
};

}  // namespace squeeze::tokenizer
