// The parser of the Jinja subset (jinja.h), over jinja_lexer.h's tokens. It follows jinja2's grammar and precedence
// (parser.py): conditional < or < and < not < comparison < + - < ~ < * / // % < ** < unary <
// filters and tests < postfix.
#include <cctype>
#include <string>
#include <string_view>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace squeeze::jinja {
namespace {

std::unique_ptr<Stmt> new_stmt(Stmt::Type type, int line) {
  auto s = std::make_unique<Stmt>();
  s->type = type;
  s->line = line;
  return s;
}

[[noreturn]] void fail(const std::string& what, int line) { fail_at(what, line); }

Value int_literal(const std::string& text, int line) {
  try {
    return Value(static_cast<int64_t>(std::stoll(text)));
  } catch (const std::exception&) {
    fail("integer literal out of range: " + text, line);
  }
}

Value float_literal(const std::string& text, int line) {
  try {
    return Value(std::stod(text));
  } catch (const std::exception&) {
    fail("float literal out of range: " + text, line);
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  // Nesting of expressions and blocks is bounded, so that no input can exhaust the stack of the
  // parser or of the renderer that walks the tree (real templates nest a dozen levels).
  static constexpr int kMaxNesting = 100;
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.nesting_ > kMaxNesting) fail("nested too deeply", p.peek().line);
    }
    ~Nest() { --p.nesting_; }
  };

  Body parse() {
    std::string stop;
    Body body = parse_body({}, stop);
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool is_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::Op && peek(ahead).text == op;
  }
  bool is_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::Name && peek(ahead).text == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    ++i_;
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Token::Type::Eof: return "end of template";
      case Token::Type::BlockEnd: return "end of statement block";
      case Token::Type::VarEnd: return "end of print statement";
      case Token::Type::Text: return "template text";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("expected '" + std::string(op) + "', got " + describe(peek()), peek().line);
  }
  std::string expect_name() {
    if (peek().type != Token::Type::Name) fail("expected a name, got " + describe(peek()), peek().line);
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != Token::Type::BlockEnd) fail("expected end of statement block, got " + describe(peek()), peek().line);
    ++i_;
  }

  // Statements until a {% tag %} whose keyword is in `stops` (returned in `stop`, the tag's
  // keyword consumed, the rest of the tag not) or the end of the template (stops empty).
  Body parse_body(std::initializer_list<std::string_view> stops, std::string& stop) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == Token::Type::Eof) {
        if (stops.size() != 0) {
          fail("unexpected end of template, expected '" + std::string(*stops.begin()) + "'", t.line);
        }
        return body;
      }
      if (t.type == Token::Type::Text) {
        auto s = new_stmt(Stmt::Type::Text, t.line);
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.type == Token::Type::VarBegin) {
        ++i_;
        auto s = new_stmt(Stmt::Type::Output, t.line);
        s->expr = parse_tuple(true);
        if (peek().type != Token::Type::VarEnd) fail("expected end of print statement, got " + describe(peek()), peek().line);
        ++i_;
        body.push_back(std::move(s));
      } else if (t.type == Token::Type::BlockBegin) {
        ++i_;
        const Token& kw = peek();
        if (kw.type != Token::Type::Name) fail("expected a tag name, got " + describe(kw), kw.line);
        for (std::string_view s : stops) {
          if (kw.text == s) {
            stop = next().text;
            return body;
          }
        }
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t), t.line);
      }
    }
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Nest nest(*this);
    const Token kw = next();
    auto s = new_stmt(Stmt::Type::Text, kw.line);
    if (kw.text == "if") {
      s->type = Stmt::Type::If;
      ExprPtr cond = parse_tuple(true);
      expect_block_end();
      while (true) {
        std::string stop;
        Body body = parse_body({"elif", "else", "endif"}, stop);
        s->branches.emplace_back(std::move(cond), std::move(body));
        if (stop == "elif") {
          cond = parse_tuple(true);
          expect_block_end();
        } else if (stop == "else") {
          expect_block_end();
          Body else_body = parse_body({"endif"}, stop);
          s->branches.emplace_back(nullptr, std::move(else_body));
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (kw.text == "for") {
      s->type = Stmt::Type::For;
      do {
        s->targets.push_back(expect_name());
      } while (skip_op(","));
      if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe(peek()), peek().line);
      s->expr = parse_tuple(false);
      if (skip_name("if")) s->cond = parse_expression(true);
      if (is_name("recursive")) fail("recursive for loops are not supported", peek().line);
      expect_block_end();
      std::string stop;
      s->body = parse_body({"else", "endfor"}, stop);
      if (stop == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, stop);
      }
      expect_block_end();
    } else if (kw.text == "set") {
      s->type = Stmt::Type::Set;
      s->targets.push_back(expect_name());
      if (skip_op(".")) {
        s->attr = true;
        s->targets.push_back(expect_name());
      } else {
        while (skip_op(",")) s->targets.push_back(expect_name());
      }
      if (peek().type == Token::Type::BlockEnd && !s->attr && s->targets.size() == 1) {
        ++i_;
        s->type = Stmt::Type::SetBlock;
        std::string stop;
        s->body = parse_body({"endset"}, stop);
        expect_block_end();
      } else {
        expect_op("=");
        s->expr = parse_tuple(true);
        expect_block_end();
      }
    } else if (kw.text == "macro") {
      s->type = Stmt::Type::Macro;
      s->targets.push_back(expect_name());
      expect_op("(");
      while (!skip_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (skip_op(")")) break;
        std::string name = expect_name();
        ExprPtr def;
        if (skip_op("=")) def = parse_expression(true);
        s->params.emplace_back(std::move(name), std::move(def));
      }
      expect_block_end();
      std::string stop;
      s->body = parse_body({"endmacro"}, stop);
      expect_block_end();
    } else if (kw.text == "break" || kw.text == "continue") {
      s->type = kw.text == "break" ? Stmt::Type::Break : Stmt::Type::Continue;
      expect_block_end();
    } else {
      fail("unsupported tag '" + kw.text + "'", kw.line);
    }
    return s;
  }

  ExprPtr make(Expr::Type type, int line) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    return e;
  }

  // expr, or a tuple "a, b" (as a list) where one may stand.
  ExprPtr parse_tuple(bool with_condexpr) {
    const int line = peek().line;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto list = make(Expr::Type::Tuple, line);
    list->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().type == Token::Type::BlockEnd || peek().type == Token::Type::VarEnd || is_op(")")) break;
      list->args.push_back(parse_expression(with_condexpr));
    }
    return list;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    const Nest nest(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      auto c = make(Expr::Type::Cond, line);
      ExprPtr test = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(Expr::Type type, ExprPtr l, ExprPtr r, int line, std::string op = {}) {
    auto e = make(type, line);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      e = binary(Expr::Type::Or, std::move(e), parse_and(), line);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      e = binary(Expr::Type::And, std::move(e), parse_not(), line);
    }
    return e;
  }

  ExprPtr parse_not() {
    const Nest nest(*this);
    if (is_name("not")) {
      const int line = next().line;
      auto e = make(Expr::Type::Not, line);
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (peek().type == Token::Type::Op &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">="))) {
        op = next().text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Type::Compare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token op = next();
      e = binary(Expr::Type::Binary, std::move(e), parse_concat(), op.line, op.text);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      e = binary(Expr::Type::Binary, std::move(e), parse_math2(), line, "~");
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token op = next();
      e = binary(Expr::Type::Binary, std::move(e), parse_pow(), op.line, op.text);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const int line = next().line;
      e = binary(Expr::Type::Binary, std::move(e), parse_unary(true), line, "**");
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    const Nest nest(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token op = next();
      e = make(op.text == "-" ? Expr::Type::Neg : Expr::Type::Pos, op.line);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token t = next();
    switch (t.type) {
      case Token::Type::Name: {
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          auto e = make(Expr::Type::Literal, t.line);
          e->literal = Value(t.text == "true" || t.text == "True");
          return e;
        }
        if (t.text == "none" || t.text == "None") {
          auto e = make(Expr::Type::Literal, t.line);
          e->literal = Value::none();
          return e;
        }
        auto e = make(Expr::Type::Name, t.line);
        e->name = t.text;
        return e;
      }
      case Token::Type::String: {
        std::string s = t.text;
        while (peek().type == Token::Type::String) s += next().text;  // "a" "b" concatenates
        auto e = make(Expr::Type::Literal, t.line);
        e->literal = Value(std::move(s));
        return e;
      }
      case Token::Type::Int: {
        auto e = make(Expr::Type::Literal, t.line);
        e->literal = int_literal(t.text, t.line);
        return e;
      }
      case Token::Type::Float: {
        auto e = make(Expr::Type::Literal, t.line);
        e->literal = float_literal(t.text, t.line);
        return e;
      }
      case Token::Type::Op:
        if (t.text == "(") {
          if (skip_op(")")) return make(Expr::Type::Tuple, t.line);
          ExprPtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto e = make(Expr::Type::List, t.line);
          while (!skip_op("]")) {
            if (!e->args.empty()) {
              expect_op(",");
              if (skip_op("]")) break;
            }
            e->args.push_back(parse_expression(true));
          }
          return e;
        }
        if (t.text == "{") {
          auto e = make(Expr::Type::Dict, t.line);
          while (!skip_op("}")) {
            if (!e->args.empty()) {
              expect_op(",");
              if (skip_op("}")) break;
            }
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->args.push_back(parse_expression(true));
          }
          return e;
        }
        break;
      default:
        break;
    }
    fail("unexpected " + describe(t), t.line);
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const int line = next().line;
        if (peek().type == Token::Type::Int) {  // x.0 is x[0]
          auto item = make(Expr::Type::Item, line);
          item->args.push_back(std::move(e));
          auto index = make(Expr::Type::Literal, line);
          const Token& digits = next();
          index->literal = int_literal(digits.text, digits.line);
          item->args.push_back(std::move(index));
          e = std::move(item);
          continue;
        }
        auto attr = make(Expr::Type::Attr, line);
        attr->name = expect_name();
        attr->args.push_back(std::move(e));
        e = std::move(attr);
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e), Expr::Type::Call);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr subject) {
    const int line = next().line;  // [
    ExprPtr parts[3];
    int colons = 0;
    while (!skip_op("]")) {
      if (skip_op(":")) {
        if (++colons > 2) fail("too many ':' in a slice", line);
        continue;
      }
      if (parts[colons]) fail("expected ']' or ':'", peek().line);
      parts[colons] = parse_expression(true);
    }
    if (colons == 0) {
      if (!parts[0]) fail("empty subscript", line);
      auto e = make(Expr::Type::Item, line);
      e->args.push_back(std::move(subject));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(Expr::Type::Slice, line);
    e->args.push_back(std::move(subject));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // (args, name=value) after a callee, a filter or a test; e->args[0] is already the subject.
  void parse_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      first = false;
      if (peek().type == Token::Type::Name && is_op("=", 1)) {
        std::string key = next().text;
        ++i_;
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail("positional argument after keyword argument", peek().line);
        e.args.push_back(parse_expression(true));
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee, Expr::Type type) {
    auto e = make(type, peek().line);
    e->args.push_back(std::move(callee));
    parse_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        const int line = next().line;
        auto f = make(Expr::Type::Filter, line);
        f->name = expect_name();
        while (skip_op(".")) {
          f->name += '.';
          f->name += expect_name();
        }
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        const int line = next().line;
        auto t = make(Expr::Type::Test, line);
        t->negated = skip_name("not");
        t->name = expect_name();
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_args(*t);
        } else if (starts_test_argument()) {
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), Expr::Type::Call);
      } else {
        return e;
      }
    }
  }

  // jinja2 parses "x is divisibleby 3" / "x is equalto y": an argument without parentheses.
  bool starts_test_argument() const {
    const Token& t = peek();
    switch (t.type) {
      case Token::Type::String:
      case Token::Type::Int:
      case Token::Type::Float: return true;
      case Token::Type::Name:
        return t.text != "else" && t.text != "or" && t.text != "and" && t.text != "if" && t.text != "in" &&
               t.text != "not" && t.text != "is";
      case Token::Type::Op: return t.text == "[" || t.text == "{";
      default: return false;
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int nesting_ = 0;
};

}  // namespace

Body parse_template(std::string_view source) {
  return Parser(lex(source)).parse();
}

}  // namespace squeeze::jinja
