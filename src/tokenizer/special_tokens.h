// Splitting special-token texts out of the input before pre-tokenization (internal header),
// as llama.cpp's tokenizer_st_partition.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace squeeze::tokenizer {

// Either a special token (token >= 0) or a range of the input still to be tokenized as text.
struct Fragment {
  Token token = -1;
  size_t offset = 0, length = 0;
};

class SpecialTokens {
 public:
  // Takes the control, user-defined and unknown tokens of the vocab, longest text first.
  SpecialTokens(const std::vector<std::string>& texts, const std::vector<TokenType>& types);

  // Splits `text` at every occurrence of a special token's text: each token in turn (longest
  // first) is cut out of every text fragment left so far. User-defined tokens are always cut
  // out; control and unknown tokens only with `parse_special` (llama.cpp's rule).
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;

 private:
  struct Entry {
    Token id;
    std::string text;
    bool needs_parse_special;
  };
  std::vector<Entry> entries_;
};

}  // namespace squeeze::tokenizer
