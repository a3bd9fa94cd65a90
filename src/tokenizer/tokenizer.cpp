// Special-token partition, then per text fragment either byte-level BPE (pre-tokenizer ->
// byte-level -> BPE merges; tokenizer.ggml.model "gpt2"), SentencePiece-style merges by score
// ("llama"), or BPE merges over SentencePiece-style text ("gemma4": spaces written as U+2581,
// split only between runs of newlines and of other characters, raw UTF-8, <0xXX> byte
// fallback), as llama.cpp's tokenize.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <optional>
#include <span>
#include <utility>
#include <string_view>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"

namespace squeeze::tokenizer {
namespace {

// Token texts llama.cpp takes as end-of-turn when tokenizer.ggml.eot_token_id is absent.
constexpr std::array<std::string_view, 11> kEotTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
};
// Token texts llama.cpp puts in its end-of-generation set (llama-vocab.cpp, special_eog_ids).
constexpr std::array<std::string_view, 22> kEogTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
};
// Fill-in-the-middle pad, repo and file-separator tokens, which llama.cpp finds by text (one of
// each group) and also counts as end of generation.
constexpr std::array<std::string_view, 5> kFimPadTexts = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                                          "<PAD>", "[PAD]"};
constexpr std::array<std::string_view, 5> kFimRepTexts = {"<|fim_repo|>", "<|repo_name|>",
                                                          "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::array<std::string_view, 1> kFimSepTexts = {"<|file_sep|>"};

bool in(std::string_view text, std::span<const std::string_view> list) {
  return std::find(list.begin(), list.end(), text) != list.end();
}

void check_id(const char* what, Token id, size_t n_vocab) {
  if (id < -1 || id >= static_cast<Token>(n_vocab)) {
    throw FormatError(std::string("tokenizer: ") + what + " token id " + std::to_string(id) +
                      " is outside the vocab of " + std::to_string(n_vocab) + " tokens");
  }
}

// The bytes a token stands for; control and unknown tokens give their text (callers hide them).
std::string render_piece(const std::string& text, TokenType type, bool spm) {
  switch (type) {
    case TokenType::Normal:
      return spm ? spm_unescape(text) : ByteLevel::get().decode(text);
    case TokenType::Control:
    case TokenType::Unknown:
    case TokenType::UserDefined:
      return text;
    case TokenType::Byte:  // "<0xAB>"
      if (text.size() == 6 && text.starts_with("<0x") && text.back() == '>') {
        return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
      }
      return spm ? text : ByteLevel::get().decode(text);
    case TokenType::Undefined:
    case TokenType::Unused:
      break;
  }
  return {};
}

}  // namespace

struct Tokenizer::Impl {
  VocabData vocab;
  bool spm;       // SentencePiece-style ("llama")
  bool spm_bpe;   // BPE on SentencePiece-style text ("gemma4"); neither: byte-level BPE ("gpt2")
  PreTokenizer pre;
  BpeMerges merges;
  std::optional<SpmMerges> spm_merges;  // set when spm
  TokenMap token_to_id;
  SpecialTokens specials;
  std::vector<std::string> pieces;  // id -> bytes, control tokens rendered
  std::vector<bool> eog;            // id -> ends generation

  explicit Impl(VocabData v);
};

static VocabData checked(VocabData v) {
  if (v.model != "gpt2" && v.model != "llama" && v.model != "gemma4") {
    throw FormatError("unsupported tokenizer model tokenizer.ggml.model = '" + v.model +
                      "'; squeeze supports: gpt2 (byte-level BPE), llama (SentencePiece), gemma4 "
                      "(BPE on SentencePiece-style text)");
  }
  const size_t n = v.tokens.size();
  if (n == 0) throw FormatError("tokenizer: the vocab has no tokens");
  if (v.types.empty()) v.types.assign(n, TokenType::Normal);
  if (v.types.size() != n) {
    throw FormatError("tokenizer: " + std::to_string(v.types.size()) + " token types for " +
                      std::to_string(n) + " tokens");
  }
  check_id("BOS", v.bos, n);
  check_id("EOS", v.eos, n);
  check_id("EOT", v.eot, n);
  check_id("UNK", v.unk, n);
  check_id("PAD", v.pad, n);
  return v;
}

Tokenizer::Impl::Impl(VocabData v)
    : vocab(checked(std::move(v))),
      spm(vocab.model == "llama"),
      spm_bpe(vocab.model == "gemma4"),
      pre(spm || spm_bpe ? "default" : vocab.pre),
      merges(vocab.merges),
      specials({}, {}) {
  const size_t n = vocab.tokens.size();
  token_to_id.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = vocab.tokens[id];
    token_to_id[text.empty() ? "[EMPTY_" + std::to_string(id) + "]" : text] = static_cast<Token>(id);
  }

  // End of generation, as llama.cpp decides it: EOS, EOT (found by text when not given) and
  // the tokens in kEogTexts; all of those are treated as control tokens.
  eog.assign(n, false);
  auto mark_eog = [&](size_t id) {
    eog[id] = true;
    vocab.types[id] = TokenType::Control;
  };
  bool fim_pad = false, fim_rep = false, fim_sep = false;
  auto first_of = [&](bool& found, size_t id, std::span<const std::string_view> texts) {
    if (found || !in(vocab.tokens[id], texts)) return;
    found = true;
    mark_eog(id);
  };
  for (size_t id = 0; id < n; ++id) {
    if (vocab.eot < 0 && in(vocab.tokens[id], kEotTexts)) vocab.eot = static_cast<Token>(id);
    if (in(vocab.tokens[id], kEogTexts)) mark_eog(id);
    first_of(fim_pad, id, kFimPadTexts);
    first_of(fim_rep, id, kFimRepTexts);
    first_of(fim_sep, id, kFimSepTexts);
  }
  if (vocab.eos >= 0) eog[vocab.eos] = true;
  if (vocab.eot >= 0) mark_eog(vocab.eot);

  if (spm) spm_merges.emplace(vocab.tokens, vocab.scores);
  specials = SpecialTokens(vocab.tokens, vocab.types);
  pieces.resize(n);
  for (size_t id = 0; id < n; ++id) pieces[id] = render_piece(vocab.tokens[id], vocab.types[id], spm || spm_bpe);
}

Tokenizer::Tokenizer(VocabData vocab) : impl_(std::make_unique<Impl>(std::move(vocab))) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;

std::vector<Token> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& im = *impl_;
  std::vector<Token> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && im.vocab.add_bos) {
    if (im.vocab.bos < 0) throw FormatError("tokenizer: the vocab asks for BOS but has no BOS token");
    out.push_back(im.vocab.bos);
  }
  std::vector<std::string> words;
  std::string encoded;
  bool after_special = true;  // SentencePiece: a space prefix at the start and after a special token
  for (const Fragment& f : im.specials.partition(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    if (im.spm) {
      std::string piece;
      if (im.vocab.add_space_prefix && after_special) piece.push_back(' ');
      piece.append(text.substr(f.offset, f.length));
      im.spm_merges->encode(spm_escape(piece), im.token_to_id, out);
      after_special = false;
      continue;
    }
    if (im.spm_bpe) {
      const std::string escaped = spm_escape(text.substr(f.offset, f.length));
      for (size_t at = 0; at < escaped.size();) {
        const bool newlines = escaped[at] == '\n';
        size_t end = at;
        while (end < escaped.size() && (escaped[end] == '\n') == newlines) ++end;
        const std::string_view word(escaped.data() + at, end - at);
        at = end;
        // A run of newlines that is a token is that token (llama.cpp's fix for gemma4).
        if (newlines) {
          if (const auto it = im.token_to_id.find(word); it != im.token_to_id.end()) {
            out.push_back(it->second);
            continue;
          }
        }
        im.merges.merge_word(word, im.token_to_id, out, /*hex_bytes=*/true);
      }
      continue;
    }
    words.clear();
    im.pre.split(text.substr(f.offset, f.length), words);
    for (const std::string& word : words) {
      ByteLevel::get().encode(word, encoded);
      if (im.pre.ignore_merges()) {
        if (const auto it = im.token_to_id.find(std::string_view(encoded)); it != im.token_to_id.end()) {
          out.push_back(it->second);
          continue;
        }
      }
      im.merges.merge_word(encoded, im.token_to_id, out);
    }
  }
  if (add_special && im.vocab.add_eos) {
    if (im.vocab.eos < 0) throw FormatError("tokenizer: the vocab asks for EOS but has no EOS token");
    out.push_back(im.vocab.eos);
  }
  return out;
}

std::string Tokenizer::token_to_piece(Token t, bool render_special) const {
  const Impl& im = *impl_;
  if (t < 0 || t >= n_vocab()) {
    throw Error("token id " + std::to_string(t) + " is outside the vocab of " +
                std::to_string(n_vocab()) + " tokens");
  }
  const TokenType type = im.vocab.types[t];
  if (!render_special && (type == TokenType::Control || type == TokenType::Unknown)) return {};
  return im.pieces[t];
}

std::string Tokenizer::decode(const std::vector<Token>& ids, bool render_special) const {
  std::string out;
  for (Token t : ids) out += token_to_piece(t, render_special);
  return out;
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->vocab.tokens.size()); }
Token Tokenizer::bos() const { return impl_->vocab.bos; }
Token Tokenizer::eos() const { return impl_->vocab.eos; }
bool Tokenizer::is_eog(Token t) const { return t >= 0 && t < n_vocab() && impl_->eog[t]; }
const VocabData& Tokenizer::vocab() const { return impl_->vocab; }

// Length of an incomplete UTF-8 sequence at the end of `s` (0 when it ends on a boundary).
static size_t incomplete_utf8_tail(std::string_view s) {
  for (size_t k = 1; k <= std::min<size_t>(s.size(), 4); ++k) {
    const auto c = static_cast<uint8_t>(s[s.size() - k]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back for the lead
    const size_t need = c >= 0xF8 ? 1 : utf8_seq_len(c);
    return need > k ? k : 0;
  }
  return 0;
}

std::string StreamDecoder::push(Token t) {
  pending_ += tok_.token_to_piece(t, render_special_);
  const size_t keep = incomplete_utf8_tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::flush() { return std::exchange(pending_, {}); }

}  // namespace squeeze::tokenizer
