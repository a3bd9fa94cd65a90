#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace squeeze::tokenizer {

SpecialTokens::SpecialTokens(const std::vector<std::string>& texts,
                             const std::vector<TokenType>& types) {
  for (size_t id = 0; id < texts.size(); ++id) {
    const TokenType type = id < types.size() ? types[id] : TokenType::Normal;
    const bool special =
        type == TokenType::Control || type == TokenType::UserDefined || type == TokenType::Unknown;
    if (!special) continue;
    if (texts[id].empty()) continue;
    entries_.push_back({static_cast<Token>(id), texts[id], type != TokenType::UserDefined});
  }
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const Entry& a, const Entry& b) { return a.text.size() > b.text.size(); });
}

std::vector<Fragment> SpecialTokens::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (const Entry& e : entries_) {
    if (e.needs_parse_special && !parse_special) continue;
    if (text.find(e.text) == std::string_view::npos) continue;  // cheap test for the common case
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view raw = text.substr(f.offset, f.length);
      size_t at = 0;
      for (size_t hit = raw.find(e.text); hit != std::string_view::npos; hit = raw.find(e.text, at)) {
        if (hit > at) next.push_back({-1, f.offset + at, hit - at});
        next.push_back({e.id, 0, 0});
        at = hit + e.text.size();
      }
      if (at < raw.size()) next.push_back({-1, f.offset + at, raw.size() - at});
    }
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace squeeze::tokenizer
