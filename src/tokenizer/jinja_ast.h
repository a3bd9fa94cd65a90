// The syntax tree of a parsed Jinja template (jinja_parse.cpp builds it, jinja_render.cpp walks it).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace squeeze::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Type {
    Literal,  // literal
    Name,     // name
    Attr,     // args[0].name
    Item,     // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]] (null where left out)
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs)
    Test,     // args[0] is [not] name(args[1..])
    Neg,      // -args[0]
    Pos,      // +args[0]
    Not,      // not args[0]
    And,      // args[0] and args[1]
    Or,       // args[0] or args[1]
    Binary,   // args[0] name args[1]: + - * / // % ** ~
    Compare,  // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in "not in"
    Cond,     // args[1] if args[0] else args[2] (args[2] null: Undefined)
    List,     // [args...]
    Tuple,    // (args...) or a, b
    Dict,     // {args[0]: args[1], args[2]: args[3], ...}
  };
  Type type;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Type {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches: (condition, body) pairs; a null condition is the else branch
    For,       // for targets in expr [if cond]: body [else: else_body]
    Set,       // set targets = expr; targets {name} or {namespace, attribute} (attr) or a tuple
    SetBlock,  // set targets[0] %}body{% endset
    Macro,     // macro name(params): body
    Break,
    Continue,
  };
  Type type;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::string> targets;
  bool attr = false;  // Set: targets = {namespace, attribute}
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro: name, default (may be null)
};

// Throws Error("jinja: WHAT (template line LINE)").
[[noreturn]] void fail_at(const std::string& what, int line);

// Parses a template (jinja_parse.cpp). Throws Error with the line number.
Body parse_template(std::string_view source);

}  // namespace squeeze::jinja
