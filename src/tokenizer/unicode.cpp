#include "tokenizer/unicode.h"

namespace squeeze::tokenizer {

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt < 0x80) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = p[i];
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cpt, min;
    if ((b0 & 0xE0) == 0xC0) {
      len = 2, cpt = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      len = 3, cpt = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      len = 4, cpt = b0 & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cpt = (cpt << 6) | (p[i + k] & 0x3F);
    }
    if (cpt < min || cpt > 0x10FFFF || (cpt >= 0xD800 && cpt <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

std::vector<uint32_t> decode_utf8_lenient(std::string_view s) {
  constexpr uint32_t kReplacement = 0xFFFD;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  std::vector<uint32_t> cpts;
  cpts.reserve(n);
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = p[i];
    size_t len = 0;
    uint32_t cpt = 0;
    if (b0 < 0x80) {
      len = 1, cpt = b0;
    } else if ((b0 & 0x40) == 0) {
      len = 0;  // continuation byte where a sequence should start
    } else if ((b0 & 0x20) == 0) {
      len = 2, cpt = b0 & 0x1F;
    } else if ((b0 & 0x10) == 0) {
      len = 3, cpt = b0 & 0x0F;
    } else if ((b0 & 0x08) == 0) {
      len = 4, cpt = b0 & 0x07;
    }
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xC0) == 0x80;
      cpt = (cpt << 6) | (p[i + k] & 0x3F);
    }
    if (!ok) {
      cpts.push_back(kReplacement);
      ++i;
      continue;
    }
    cpts.push_back(cpt > 0x10FFFF ? kReplacement : cpt);
    i += len;
  }
  return cpts;
}

const ByteLevel& ByteLevel::get() {
  static const ByteLevel table;
  return table;
}

ByteLevel::ByteLevel() {
  cpt_to_byte_.fill(-1);
  uint32_t next_extra = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cpt = printable ? static_cast<uint32_t>(b) : next_extra++;
    byte_to_cpt_[b] = cpt;
    append_utf8(byte_to_utf8_[b], cpt);
    cpt_to_byte_[cpt] = static_cast<int16_t>(b);
  }
}

void ByteLevel::encode(std::string_view bytes, std::string& out) const {
  out.clear();
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_to_utf8_[static_cast<uint8_t>(c)];
}

std::string ByteLevel::decode(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  for (uint32_t cpt : decode_utf8_lenient(text)) {
    if (cpt < cpt_to_byte_.size() && cpt_to_byte_[cpt] >= 0) {
      out.push_back(static_cast<char>(cpt_to_byte_[cpt]));
    } else {
      append_utf8(out, cpt);
    }
  }
  return out;
}

}  // namespace squeeze::tokenizer
