#include "tokenizer/jinja_strings.h"

#include <algorithm>
#include <cctype>
#include <clocale>
#include <cwctype>
#include <locale.h>
#include <set>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace squeeze::jinja {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error("jinja: " + what); }

bool is_py_space(std::string_view cp) {
  return cp == " " || cp == "\t" || cp == "\n" || cp == "\r" || cp == "\v" || cp == "\f" ||
         cp == "\x1c" || cp == "\x1d" || cp == "\x1e" || cp == "\x1f" || cp == "\xc2\x85" ||
         cp == "\xc2\xa0" || cp == "\xe3\x80\x80" || cp == "\xe2\x80\xa8" || cp == "\xe2\x80\xa9";
}

locale_t utf8_locale() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return loc;
}

}  // namespace

// The string's code points, each as its UTF-8 bytes (Python indexes strings by code point).
std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// Python's str.strip / lstrip / rstrip: whitespace, or the code points of `chars`.
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const auto cps = code_points(s);
  std::set<std::string_view> set;
  const bool custom = chars.is_string();
  std::vector<std::string_view> char_cps;
  if (custom) {
    char_cps = code_points(chars.as_string());
    set.insert(char_cps.begin(), char_cps.end());
  } else if (!chars.is_none() && !chars.is_undefined()) {
    fail("strip arg must be None or str, not " + std::string(chars.type_name()));
  }
  const auto drop = [&](std::string_view cp) { return custom ? set.count(cp) > 0 : is_py_space(cp); };
  size_t b = 0;
  size_t e = cps.size();
  if (left) {
    while (b < e && drop(cps[b])) ++b;
  }
  if (right) {
    while (e > b && drop(cps[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

Value split(const std::string& s, const Value& sep, int64_t maxsplit) {
  Value::List out;
  if (sep.is_none() || sep.is_undefined()) {
    const auto cps = code_points(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && is_py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      std::string word;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        for (; i < cps.size(); ++i) word += cps[i];
        // Python keeps the rest as it is, trailing whitespace stripped.
        out.emplace_back(strip(word, Value::none(), false, true));
        break;
      }
      for (; i < cps.size() && !is_py_space(cps[i]); ++i) word += cps[i];
      out.emplace_back(std::move(word));
    }
    return Value::list(std::move(out));
  }
  if (!sep.is_string()) fail("split: separator must be a string");
  const std::string& d = sep.as_string();
  if (d.empty()) fail("split: empty separator");
  size_t from = 0;
  while (true) {
    const size_t at = (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) ? std::string::npos : s.find(d, from);
    if (at == std::string::npos) {
      out.emplace_back(s.substr(from));
      break;
    }
    out.emplace_back(s.substr(from, at - from));
    from = at + d.size();
  }
  return Value::list(std::move(out));
}

std::string replace(const std::string& s, const std::string& old, const std::string& with, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `with` between every code point (and at both ends)
    const auto cps = code_points(s);
    int64_t n = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) {
        out += with;
        ++n;
      }
      if (i < cps.size()) out += cps[i];
    }
    return out;
  }
  size_t from = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t at = s.find(old, from);
    if (at == std::string::npos) break;
    out += s.substr(from, at - from) + with;
    from = at + old.size();
    ++n;
  }
  return out + s.substr(from);
}

std::string change_case(const std::string& s, Case mode) {
  const bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  const locale_t loc = ascii ? static_cast<locale_t>(nullptr) : utf8_locale();
  if (!ascii && loc == static_cast<locale_t>(nullptr)) {
    fail("changing the case of non-ASCII text needs the C.UTF-8 locale, which this system lacks");
  }
  const auto is_alpha = [&](uint32_t c) { return ascii ? std::isalpha(static_cast<int>(c)) != 0 : iswalpha_l(static_cast<wint_t>(c), loc) != 0; };
  const auto to_upper = [&](uint32_t c) { return ascii ? static_cast<uint32_t>(std::toupper(static_cast<int>(c))) : static_cast<uint32_t>(towupper_l(static_cast<wint_t>(c), loc)); };
  const auto to_lower = [&](uint32_t c) { return ascii ? static_cast<uint32_t>(std::tolower(static_cast<int>(c))) : static_cast<uint32_t>(towlower_l(static_cast<wint_t>(c), loc)); };
  std::string out;
  bool word_start = true;
  bool first = true;
  for (const uint32_t c : tokenizer::decode_utf8_lenient(s)) {
    bool up = false;
    switch (mode) {
      case Case::Upper: up = true; break;
      case Case::Lower: up = false; break;
      case Case::Capitalize: up = first; break;
      case Case::Title: up = word_start; break;
    }
    if (up && c == 0xDF) {  // ß
      out += mode == Case::Upper ? "SS" : "Ss";
    } else {
      tokenizer::append_utf8(out, up ? to_upper(c) : to_lower(c));
    }
    word_start = !is_alpha(c);
    first = false;
  }
  return out;
}


std::string format(const std::string& fmt, const Args& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}' ) {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else fail("format: single '}'");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t end = fmt.find('}', i);
    if (end == std::string::npos) fail("format: single '{'");
    const std::string field = fmt.substr(i + 1, end - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) fail("format: field '" + field + "' is not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_index < a.positional.size()) v = &a.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
      if (field.size() < 9) {
        const size_t k = std::stoul(field);
        if (k < a.positional.size()) v = &a.positional[k];
      }
    } else {
      for (const auto& [name, val] : a.keyword) {
        if (name == field) v = &val;
      }
    }
    if (v == nullptr) fail("format: no argument for '{" + field + "}'");
    out += v->str();
    i = end;
  }
  return out;
}

}  // namespace squeeze::jinja
