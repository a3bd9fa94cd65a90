#include "tokenizer/spm.h"

#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace squeeze::tokenizer {
namespace {

struct Symbol {
  int prev = -1, next = -1;
  size_t offset = 0, n = 0;  // bytes of the text; n == 0: merged into its left neighbour
};

struct Bigram {
  int left = 0, right = 0;
  float score = 0;
  size_t size = 0;  // bytes of both symbols when the pair was queued
};

// The highest score first; on equal scores the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(text.substr(pos, hit - pos)).append(to);
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace

std::string spm_escape(std::string_view text) { return replace_all(text, " ", kSpmSpace); }
std::string spm_unescape(std::string_view text) { return replace_all(text, kSpmSpace, " "); }

SpmMerges::SpmMerges(const std::vector<std::string>& tokens, const std::vector<float>& scores)
    : scores_(scores) {
  if (scores_.size() != tokens.size()) {
    throw FormatError("tokenizer: " + std::to_string(scores_.size()) + " token scores for " +
                      std::to_string(tokens.size()) + " tokens");
  }
  byte_token_.fill(-1);
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::unordered_map<std::string_view, Token> by_text;
  for (size_t id = 0; id < tokens.size(); ++id) by_text.emplace(tokens[id], static_cast<Token>(id));
  for (int b = 0; b < 256; ++b) {
    const std::string hex = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    if (auto it = by_text.find(hex); it != by_text.end()) {
      byte_token_[b] = it->second;
    } else if (auto one = by_text.find(std::string(1, static_cast<char>(b))); one != by_text.end()) {
      byte_token_[b] = one->second;  // llama.cpp's fallback: the byte itself as a token text
    }
  }
}

void SpmMerges::encode(std::string_view text, const TokenMap& vocab, std::vector<Token>& out) const {
  std::vector<Symbol> symbols;
  for (size_t offs = 0; offs < text.size();) {
    Symbol s;
    s.offset = offs;
    s.n = std::min(utf8_seq_len(static_cast<uint8_t>(text[offs])), text.size() - offs);
    offs += s.n;
    s.prev = static_cast<int>(symbols.size()) - 1;
    s.next = offs == text.size() ? -1 : static_cast<int>(symbols.size()) + 1;
    symbols.push_back(s);
  }
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  // The pair each merged text was last queued from (resegment's way back).
  std::unordered_map<std::string, std::pair<int, int>> rev_merge;
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string_view pair = text.substr(symbols[left].offset, symbols[left].n + symbols[right].n);
    const auto it = vocab.find(pair);
    if (it == vocab.end()) return;
    queue.push({left, right, scores_[static_cast<size_t>(it->second)], pair.size()});
    rev_merge[std::string(pair)] = {left, right};
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // a side merged since
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  auto resegment = [&](auto& self, const Symbol& s) -> void {
    const std::string_view piece = text.substr(s.offset, s.n);
    if (const auto it = vocab.find(piece); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
    if (const auto p = rev_merge.find(std::string(piece)); p != rev_merge.end()) {
      self(self, symbols[p->second.first]);
      self(self, symbols[p->second.second]);
      return;
    }
    for (const char c : piece) {
      const Token t = byte_token_[static_cast<uint8_t>(c)];
      if (t < 0) {
        throw Error("tokenizer: byte 0x" + std::to_string(static_cast<uint8_t>(c)) +
                    " has no token in this vocab");
      }
      out.push_back(t);
    }
  };
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) resegment(resegment, symbols[i]);
}

}  // namespace squeeze::tokenizer
