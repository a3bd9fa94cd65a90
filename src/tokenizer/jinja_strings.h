// Python's str operations on UTF-8 text, as chat templates call them (jinja_builtins.cpp binds
// them as methods and filters). Strings index by code point, as in Python.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace squeeze::jinja {

// The string's code points, each as its UTF-8 bytes.
std::vector<std::string_view> code_points(std::string_view s);

// str.strip / lstrip / rstrip: Python's whitespace, or the code points of `chars` (a string;
// None or Undefined: whitespace).
std::string strip(const std::string& s, const Value& chars, bool left, bool right);
// str.split(sep, maxsplit): sep None or Undefined splits at runs of whitespace.
Value split(const std::string& s, const Value& sep, int64_t maxsplit);
// str.replace(old, with, count); count < 0: all.
std::string replace(const std::string& s, const std::string& old, const std::string& with, int64_t count);

// str.upper / lower / capitalize / title. Non-ASCII letters map through glibc's C.UTF-8 locale
// (Unicode's simple case mappings; of Python's one-to-many mappings only ß's is made).
enum class Case { Upper, Lower, Capitalize, Title };
std::string change_case(const std::string& s, Case mode);
inline std::string upper(const std::string& s) { return change_case(s, Case::Upper); }
inline std::string lower(const std::string& s) { return change_case(s, Case::Lower); }

// str.format with {} / {0} / {name} fields (no format specs) and {{ }} escapes.
std::string format(const std::string& fmt, const Args& a);

}  // namespace squeeze::jinja
