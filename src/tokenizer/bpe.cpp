#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "tokenizer/unicode.h"

namespace squeeze::tokenizer {

BpeMerges::BpeMerges(const std::vector<std::string>& merges) {
  ranks_.reserve(merges.size());
  std::string key;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string_view m = merges[i];
    const size_t space = m.find(' ', 1);
    if (space == std::string_view::npos) continue;  // llama.cpp ranks it as ("", ""): never used
    make_key(m.substr(0, space), m.substr(space + 1), key);
    ranks_.try_emplace(key, static_cast<int32_t>(i));
  }
}

// 0xFF never occurs in UTF-8, so it separates the two halves unambiguously.
void BpeMerges::make_key(std::string_view left, std::string_view right, std::string& key) {
  key.assign(left);
  key.push_back('\xFF');
  key.append(right);
}

int32_t BpeMerges::rank(std::string_view left, std::string_view right, std::string& key) const {
  make_key(left, right, key);
  const auto it = ranks_.find(std::string_view(key));
  return it == ranks_.end() ? -1 : it->second;
}

namespace {

struct Symbol {
  uint32_t begin = 0, len = 0;  // bytes of the word; len 0 once merged into its left neighbour
  int32_t prev = -1, next = -1;
};

struct Bigram {
  int32_t rank = 0;
  int32_t left = 0, right = 0;
  uint32_t left_len = 0, right_len = 0;  // symbol lengths when queued, to spot stale entries
};

// Lowest rank first; among equal ranks the leftmost pair.
struct BigramLater {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void BpeMerges::merge_word(std::string_view word, const TokenMap& vocab, std::vector<Token>& out,
                           bool hex_bytes) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (uint32_t at = 0; at < word.size();) {
    const auto len = static_cast<uint32_t>(
        std::min(word.size() - at, utf8_seq_len(static_cast<uint8_t>(word[at]))));
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({at, len, index - 1, at + len < word.size() ? index + 1 : -1});
    at += len;
  }
  auto text = [&](const Symbol& s) { return word.substr(s.begin, s.len); };

  std::string key;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLater> queue;
  auto push_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const int32_t rk = rank(text(l), text(r), key);
    if (rk >= 0) queue.push({rk, left, right, l.len, r.len});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) push_pair(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.len != b.left_len || r.len != b.right_len || r.len == 0) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    push_pair(l.prev, b.left);
    push_pair(b.left, l.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text(symbols[i]);
    if (const auto it = vocab.find(piece); it != vocab.end()) {
      out.push_back(it->second);
      continue;
    }
    for (char c : piece) {
      char hex[7] = {'<', '0', 'x', "0123456789ABCDEF"[static_cast<uint8_t>(c) >> 4],
                     "0123456789ABCDEF"[static_cast<uint8_t>(c) & 15], '>', 0};
      const auto it = vocab.find(hex_bytes ? std::string_view(hex, 6) : std::string_view(&c, 1));
      if (it != vocab.end()) out.push_back(it->second);
    }
  }
}

}  // namespace squeeze::tokenizer
