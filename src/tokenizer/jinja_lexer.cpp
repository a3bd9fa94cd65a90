#include "tokenizer/jinja_lexer.h"

#include <cctype>
#include <cstdint>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/unicode.h"

namespace squeeze::jinja {

void fail_at(const std::string& what, int line) {
  throw Error("jinja: " + what + " (template line " + std::to_string(line) + ")");
}

namespace {

[[noreturn]] void fail(const std::string& what, int line) { fail_at(what, line); }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {  // jinja2 normalises \r\n and \r to \n
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();  // keep_trailing_newline=False
  }

  std::vector<Token> run() {
    bool line_start = true;  // what precedes the text ends a line (or is the template's start)
    while (pos_ < src_.size()) {
      size_t open = pos_;
      while (true) {
        open = src_.find('{', open);
        if (open == std::string::npos || open + 1 >= src_.size()) {
          open = std::string::npos;
          break;
        }
        const char c = src_[open + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++open;
      }
      std::string text = src_.substr(pos_, open == std::string::npos ? std::string::npos : open - pos_);
      if (open == std::string::npos) {
        emit_text(text);
        pos_ = src_.size();
        break;
      }
      const char kind = src_[open + 1];
      const char flag = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (flag == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && flag != '+') {
        // lstrip_blocks: spaces and tabs between the line's start and a block or comment tag.
        const size_t nl = text.rfind('\n');
        if (nl != std::string::npos || line_start) {
          const size_t from = nl == std::string::npos ? 0 : nl + 1;
          if (text.find_first_not_of(" \t", from) == std::string::npos) text.resize(from);
        }
      }
      emit_text(text);
      line_ += count_lines(pos_, open);
      pos_ = open + 2 + (flag == '-' || flag == '+' ? 1 : 0);
      bool strip_after = false;
      if (kind == '#') {
        const size_t end = src_.find("#}", pos_);
        if (end == std::string::npos) fail("unterminated comment", line_);
        strip_after = end > pos_ && src_[end - 1] == '-';
        const bool keep = end > pos_ && src_[end - 1] == '+';
        line_ += count_lines(pos_, end);
        pos_ = end + 2;
        after_tag(strip_after, /*trim_newline=*/!keep);
      } else {
        tokens_.push_back({kind == '{' ? Token::Type::VarBegin : Token::Type::BlockBegin, "", line_});
        lex_tag(kind == '{' ? '}' : '%');
      }
      line_start = pos_ == 0 || src_[pos_ - 1] == '\n';
    }
    tokens_.push_back({Token::Type::Eof, "", line_});
    return std::move(tokens_);
  }

 private:
  int count_lines(size_t from, size_t to) const {
    int n = 0;
    for (size_t i = from; i < to && i < src_.size(); ++i) n += src_[i] == '\n';
    return n;
  }

  void emit_text(const std::string& text) {
    if (!text.empty()) tokens_.push_back({Token::Type::Text, text, line_});
  }

  // After a tag's end: "-" strips all whitespace, a block or comment end (no "+") drops one newline.
  void after_tag(bool strip, bool trim_newline) {
    if (strip) {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
    } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
  }

  // The tokens of {{ ... }} (close '}') or {% ... %} (close '%').
  void lex_tag(char close) {
    int depth = 0;  // open brackets: "}}" inside a dict literal does not end the tag
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= src_.size()) fail("unterminated tag", line_);
      const std::string_view rest = std::string_view(src_).substr(pos_);
      if (depth == 0) {
        const std::string end{close, '}'};
        const bool minus = rest.starts_with("-" + end);
        const bool plus = rest.starts_with("+" + end);
        if (minus || plus || rest.starts_with(end)) {
          pos_ += end.size() + (minus || plus ? 1 : 0);
          tokens_.push_back({close == '}' ? Token::Type::VarEnd : Token::Type::BlockEnd, "", line_});
          after_tag(minus, /*trim_newline=*/close == '%' && !plus);
          return;
        }
      }
      const char c = rest[0];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t n = 1;
        while (n < rest.size() && (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) ++n;
        tokens_.push_back({Token::Type::Name, std::string(rest.substr(0, n)), line_});
        pos_ += n;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(rest);
      } else if (c == '\'' || c == '"') {
        lex_string(rest);
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (std::string_view two : kTwo) {
          if (rest.starts_with(two)) op = std::string(two);
        }
        if (op.size() == 1 && std::string_view("+-*/%~()[]{}.,:|=<>").find(c) == std::string_view::npos) {
          fail(std::string("unexpected character '") + c + "'", line_);
        }
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        tokens_.push_back({Token::Type::Op, op, line_});
        pos_ += op.size();
      }
    }
  }

  void lex_number(std::string_view rest) {
    size_t n = 0;
    bool is_float = false;
    const auto digits = [&] {
      while (n < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) ++n;
    };
    digits();
    if (n + 1 < rest.size() && rest[n] == '.' && std::isdigit(static_cast<unsigned char>(rest[n + 1]))) {
      is_float = true;
      ++n;
      digits();
    }
    if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
      size_t m = n + 1;
      if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
      if (m < rest.size() && std::isdigit(static_cast<unsigned char>(rest[m]))) {
        is_float = true;
        n = m;
        digits();
      }
    }
    std::string text;
    for (char ch : rest.substr(0, n)) {
      if (ch != '_') text += ch;
    }
    tokens_.push_back({is_float ? Token::Type::Float : Token::Type::Int, text, line_});
    pos_ += n;
  }

  // A Python string literal with its escapes (\n \t \r \\ \' \" \xHH \uHHHH; others kept).
  void lex_string(std::string_view rest) {
    const char quote = rest[0];
    std::string out;
    size_t i = 1;
    const int start_line = line_;
    for (;; ++i) {
      if (i >= rest.size()) fail("unterminated string", start_line);
      const char c = rest[i];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || i + 1 >= rest.size()) {
        out += c;
        continue;
      }
      const char e = rest[++i];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': ++line_; break;  // a line continuation
        case 'x':
        case 'u': {
          const size_t len = e == 'x' ? 2 : 4;
          if (i + len >= rest.size()) fail("bad escape in string", line_);
          uint32_t cp = 0;
          for (size_t k = 1; k <= len; ++k) {
            const char h = rest[i + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail("bad escape in string", line_);
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          tokenizer::append_utf8(out, cp);
          i += len;
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    tokens_.push_back({Token::Type::String, out, start_line});
    pos_ += i + 1;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace squeeze::jinja
