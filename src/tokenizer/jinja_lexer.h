// The lexer of the Jinja subset (jinja.h), as jinja2's with trim_blocks and lstrip_blocks on:
// text between tags, whitespace control, newlines normalised to \n and one trailing newline of
// the template dropped. Internal to the Jinja engine.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace squeeze::jinja {

struct Token {
  enum class Type { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Type type;
  std::string text;
  int line;
};

// The template's tokens, ending with Eof. Throws Error with the line number.
std::vector<Token> lex(std::string_view source);

}  // namespace squeeze::jinja
