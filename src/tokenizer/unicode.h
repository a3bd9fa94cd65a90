// UTF-8 and GPT-2 byte-level helpers for the tokenizer (internal header).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace squeeze::tokenizer {

// Length of the UTF-8 sequence that `lead` starts, judged from its high bits only
// (continuation and invalid bytes count as 1), as llama.cpp's unicode_len_utf8.
inline size_t utf8_seq_len(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Appends the UTF-8 form of `cpt` (surrogates are written as three bytes, like llama.cpp).
void append_utf8(std::string& out, uint32_t cpt);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Decodes `s` the way llama.cpp does before pre-tokenizing: a byte that does not start a complete
// sequence becomes U+FFFD and decoding resumes at the next byte; overlong forms are accepted and
// yield their (small) code point. Code points past U+10FFFF also become U+FFFD.
std::vector<uint32_t> decode_utf8_lenient(std::string_view s);

// GPT-2 byte-level alphabet: each byte maps to one printable code point
// (printable Latin-1 bytes map to themselves, the other 68 to U+0100..U+0143).
class ByteLevel {
 public:
  static const ByteLevel& get();

  // Bytes -> their byte-level text (what the BPE vocab is written in).
  void encode(std::string_view bytes, std::string& out) const;
  // Byte-level text -> bytes. A code point outside the alphabet is copied through as UTF-8.
  std::string decode(std::string_view text) const;

  uint32_t byte_to_cpt(uint8_t b) const { return byte_to_cpt_[b]; }

 private:
  ByteLevel();
  std::array<uint32_t, 256> byte_to_cpt_{};
  std::array<std::string, 256> byte_to_utf8_;
  std::array<int16_t, 0x144> cpt_to_byte_{};  // -1 where the code point is not in the alphabet
};

}  // namespace squeeze::tokenizer
