// Renders a parsed template (jinja_ast.h) with jinja2's semantics: Python's operators and
// truthiness, a fresh scope per loop iteration (so `set` inside a loop does not leak out, which is
// why templates use namespace()), macros that see the template's top-level variables.
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_builtins.h"

namespace squeeze::jinja {

struct Template::Parsed {
  Body body;
};

namespace {

[[noreturn]] void fail(const std::string& what, int line) { fail_at(what, line); }

// Whether `v` is or holds (through lists and dicts) the dict `target`: a namespace given itself
// as an attribute would be a cycle of shared pointers that is never freed.
bool holds(const Value& v, const Value::Dict* target) {
  if (v.is_dict()) {
    if (&v.as_dict() == target) return true;
    for (const auto& [k, x] : v.as_dict()) {
      if (holds(x, target)) return true;
    }
  } else if (v.is_list()) {
    for (const Value& x : v.as_list()) {
      if (holds(x, target)) return true;
    }
  }
  return false;
}

struct Frame {
  Value::Dict vars;
  const Frame* parent = nullptr;

  const Value* lookup(std::string_view name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent) {
      for (const auto& [k, v] : f->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, x] : vars) {
      if (k == name) {
        x = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  explicit Renderer(Frame& root) : root_(root) {}

  Flow exec(const Body& body, Frame& frame, std::string& out) {
    for (const auto& s : body) {
      const Flow f = exec(*s, frame, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

 private:
  static constexpr int64_t kMaxSteps = 20'000'000;
  static constexpr size_t kMaxOutput = 64u << 20;
  static constexpr int kMaxDepth = 16;  // macro calls in progress

  void step(int line) {
    if (++steps_ > kMaxSteps) fail("the template ran too long (more than 20 million steps)", line);
  }

  void emit(std::string& out, std::string_view s, int line) {
    out += s;
    if (out.size() > kMaxOutput) fail("the template's output passed 64 MiB", line);
  }

  Flow exec(const Stmt& s, Frame& frame, std::string& out) {
    step(s.line);
    switch (s.type) {
      case Stmt::Type::Text: emit(out, s.text, s.line); return Flow::Normal;
      case Stmt::Type::Output: emit(out, eval(*s.expr, frame).str(), s.line); return Flow::Normal;
      case Stmt::Type::If:
        for (const auto& [cond, body] : s.branches) {
          if (cond == nullptr || eval(*cond, frame).truthy()) return exec(body, frame, out);
        }
        return Flow::Normal;
      case Stmt::Type::For: return exec_for(s, frame, out);
      case Stmt::Type::Set: assign(s, eval(*s.expr, frame), frame); return Flow::Normal;
      case Stmt::Type::SetBlock: {
        std::string text;
        Frame inner{{}, &frame};
        exec(s.body, inner, text);
        frame.set(s.targets[0], Value(std::move(text)));
        return Flow::Normal;
      }
      case Stmt::Type::Macro: frame.set(s.targets[0], make_macro(s)); return Flow::Normal;
      case Stmt::Type::Break: return Flow::Break;
      case Stmt::Type::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  void assign(const Stmt& s, const Value& v, Frame& frame) {
    if (s.attr) {
      const Value* ns = frame.lookup(s.targets[0]);
      if (ns == nullptr || !ns->is_namespace()) fail("cannot assign attribute on non-namespace object '" + s.targets[0] + "'", s.line);
      if (holds(v, &ns->as_dict())) fail("a namespace cannot hold itself ('" + s.targets[0] + "')", s.line);
      ns->set(s.targets[1], v);
      return;
    }
    if (s.targets.size() == 1) {
      frame.set(s.targets[0], v);
      return;
    }
    unpack(s.targets, v, frame, s.line);
  }

  static void unpack(const std::vector<std::string>& targets, const Value& v, Frame& frame, int line) {
    const Value::List items = iterate(v);
    if (items.size() != targets.size()) {
      fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()), line);
    }
    for (size_t i = 0; i < targets.size(); ++i) frame.set(targets[i], items[i]);
  }

  Flow exec_for(const Stmt& s, Frame& frame, std::string& out) {
    const Value seq = eval(*s.expr, frame);
    Value::List items = iterate(seq);
    if (s.cond) {  // "for x in xs if cond": the loop sees only the items that pass
      Value::List kept;
      for (const Value& item : items) {
        Frame probe{{}, &frame};
        bind_targets(s, item, probe);
        if (eval(*s.cond, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Frame iter{{}, &frame};
      bind_targets(s, items[static_cast<size_t>(i)], iter);
      iter.set("loop", Value::dict({
          {"index", Value(i + 1)},
          {"index0", Value(i)},
          {"revindex", Value(n - i)},
          {"revindex0", Value(n - i - 1)},
          {"first", Value(i == 0)},
          {"last", Value(i == n - 1)},
          {"length", Value(n)},
          {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("previtem")},
          {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("nextitem")},
      }));
      if (exec(s.body, iter, out) == Flow::Break) break;
    }
    if (n == 0) {
      Frame inner{{}, &frame};
      exec(s.else_body, inner, out);
    }
    return Flow::Normal;
  }

  static void bind_targets(const Stmt& s, const Value& item, Frame& frame) {
    if (s.targets.size() == 1) {
      frame.set(s.targets[0], item);
    } else {
      unpack(s.targets, item, frame, s.line);
    }
  }

  Value make_macro(const Stmt& s) {
    const Stmt* def = &s;
    return Value::function([this, def](Args& a) -> Value {
      if (++depth_ > kMaxDepth) fail("macros nested too deeply", def->line);
      if (a.positional.size() > def->params.size()) fail("macro '" + def->targets[0] + "' takes " + std::to_string(def->params.size()) + " arguments", def->line);
      Frame f{{}, &root_};
      for (size_t i = 0; i < def->params.size(); ++i) {
        const auto& [name, default_expr] = def->params[i];
        Value v;
        bool given = false;
        if (i < a.positional.size()) {
          v = a.positional[i];
          given = true;
        }
        for (const auto& [k, x] : a.keyword) {
          if (k == name) {
            v = x;
            given = true;
          }
        }
        if (!given) v = default_expr ? eval(*default_expr, f) : Value::undefined(name);
        f.set(name, std::move(v));
      }
      for (const auto& [k, x] : a.keyword) {
        bool known = false;
        for (const auto& p : def->params) known |= p.first == k;
        if (!known) fail("macro '" + def->targets[0] + "' has no argument '" + k + "'", def->line);
      }
      std::string text;
      exec(def->body, f, text);
      --depth_;
      return Value(std::move(text));
    });
  }

  Args eval_args(const Expr& e, size_t first, const Frame& frame) {
    Args a;
    for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(eval(*e.args[i], frame));
    for (const auto& [k, x] : e.kwargs) a.keyword.emplace_back(k, eval(*x, frame));
    return a;
  }

  static bool contains(const Value& seq, const Value& v, int line) {
    if (seq.is_string()) {
      if (!v.is_string()) fail("'in <string>' requires string as left operand, not " + std::string(v.type_name()), line);
      return seq.as_string().find(v.as_string()) != std::string::npos;
    }
    if (seq.is_dict() && !seq.is_namespace()) {
      return (v.is_string() || v.kind() == Value::Kind::Int) && seq.find(dict_key(v)) != nullptr;
    }
    for (const Value& x : iterate(seq)) {
      if (x == v) return true;
    }
    return false;
  }

  static bool compare_op(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "==") return a == b;
    if (op == "!=") return !(a == b);
    if (op == "in") return contains(b, a, line);
    if (op == "not in") return !contains(b, a, line);
    if (a.is_undefined() || b.is_undefined()) fail("cannot compare an undefined value with '" + op + "'", line);
    int c = 0;
    try {
      c = compare(a, b);
    } catch (const Error& e) {
      fail(std::string(e.what()).substr(7), line);
    }
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  static Value arithmetic(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "~") return Value(a.str() + b.str());
    if (a.is_undefined() || b.is_undefined()) {
      fail("'" + (a.is_undefined() ? a.as_string() : b.as_string()) + "' is undefined (in '" + op + "')", line);
    }
    const auto as_num = [](const Value& v) {
      return v.kind() == Value::Kind::Bool ? Value(int64_t{v.as_bool()}) : v;
    };
    const bool numeric = (a.is_number() || a.kind() == Value::Kind::Bool) && (b.is_number() || b.kind() == Value::Kind::Bool);
    if (numeric) {
      const Value x = as_num(a);
      const Value y = as_num(b);
      const bool ints = x.kind() == Value::Kind::Int && y.kind() == Value::Kind::Int;
      const double fx = x.as_number();
      const double fy = y.as_number();
      if (op == "+") return ints ? Value(x.as_int() + y.as_int()) : Value(fx + fy);
      if (op == "-") return ints ? Value(x.as_int() - y.as_int()) : Value(fx - fy);
      if (op == "*") return ints ? Value(x.as_int() * y.as_int()) : Value(fx * fy);
      if (op == "/") {
        if (fy == 0) fail("division by zero", line);
        return Value(fx / fy);
      }
      if (op == "//" || op == "%") {
        if (fy == 0) fail("integer division or modulo by zero", line);
        if (ints) {
          int64_t q = x.as_int() / y.as_int();
          int64_t r = x.as_int() % y.as_int();
          if (r != 0 && ((r < 0) != (y.as_int() < 0))) {
            --q;
            r += y.as_int();
          }
          return op == "//" ? Value(q) : Value(r);
        }
        const double q = std::floor(fx / fy);
        return op == "//" ? Value(q) : Value(fx - q * fy);
      }
      if (op == "**") {
        if (ints && y.as_int() >= 0) {
          int64_t r = 1;
          for (int64_t i = 0; i < y.as_int() && i < 64; ++i) r *= x.as_int();
          return Value(r);
        }
        return Value(std::pow(fx, fy));
      }
    }
    if (op == "+" && a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (op == "+" && a.is_list() && b.is_list()) {
      Value::List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(out));
    }
    if (op == "*" && (a.is_string() || a.is_list()) && b.kind() == Value::Kind::Int) {
      if (b.as_int() > 1'000'000) fail("repetition too large", line);
      if (a.is_string()) {
        std::string out;
        for (int64_t i = 0; i < b.as_int(); ++i) out += a.as_string();
        return Value(out);
      }
      Value::List out;
      for (int64_t i = 0; i < b.as_int(); ++i) out.insert(out.end(), a.as_list().begin(), a.as_list().end());
      return Value::list(std::move(out));
    }
    fail("unsupported operand types for " + op + ": '" + std::string(a.type_name()) + "' and '" + std::string(b.type_name()) + "'", line);
  }

  Value eval(const Expr& e, const Frame& frame) {
    step(e.line);
    try {
      return eval_unchecked(e, frame);
    } catch (const Error& err) {
      const std::string what = err.what();
      if (what.find("(template line") != std::string::npos || !what.starts_with("jinja: ")) throw;
      fail(what.substr(7), e.line);
    }
  }

  Value eval_unchecked(const Expr& e, const Frame& frame) {
    switch (e.type) {
      case Expr::Type::Literal: return e.literal;
      case Expr::Type::Name: {
        const Value* v = frame.lookup(e.name);
        return v ? *v : Value::undefined(e.name);
      }
      case Expr::Type::Attr: return get_attr(eval(*e.args[0], frame), e.name);
      case Expr::Type::Item: return get_item(eval(*e.args[0], frame), eval(*e.args[1], frame));
      case Expr::Type::Slice: {
        const auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i], frame) : Value(); };
        return get_slice(eval(*e.args[0], frame), part(1), part(2), part(3));
      }
      case Expr::Type::Call: {
        const Value callee = eval(*e.args[0], frame);
        if (callee.is_undefined()) fail("'" + callee.as_string() + "' is undefined (called as a function)", e.line);
        if (!callee.is_function()) fail("'" + std::string(callee.type_name()) + "' object is not callable", e.line);
        Args a = eval_args(e, 1, frame);
        return callee.as_function()(a);
      }
      case Expr::Type::Filter: {
        const Value v = eval(*e.args[0], frame);
        Args a = eval_args(e, 1, frame);
        return apply_filter(e.name, v, a);
      }
      case Expr::Type::Test: {
        const Value v = eval(*e.args[0], frame);
        Args a = eval_args(e, 1, frame);
        return Value(apply_test(e.name, v, a) != e.negated);
      }
      case Expr::Type::Neg:
      case Expr::Type::Pos: {
        const Value v = eval(*e.args[0], frame);
        if (!v.is_number() && v.kind() != Value::Kind::Bool) fail("bad operand type for unary " + std::string(e.type == Expr::Type::Neg ? "-" : "+") + ": '" + std::string(v.type_name()) + "'", e.line);
        if (e.type == Expr::Type::Pos) return v;
        if (v.kind() == Value::Kind::Float) return Value(-v.as_number());
        return Value(-(v.kind() == Value::Kind::Bool ? int64_t{v.as_bool()} : v.as_int()));
      }
      case Expr::Type::Not: return Value(!eval(*e.args[0], frame).truthy());
      case Expr::Type::And: {
        Value a = eval(*e.args[0], frame);
        return a.truthy() ? eval(*e.args[1], frame) : a;
      }
      case Expr::Type::Or: {
        Value a = eval(*e.args[0], frame);
        return a.truthy() ? a : eval(*e.args[1], frame);
      }
      case Expr::Type::Binary: return arithmetic(e.name, eval(*e.args[0], frame), eval(*e.args[1], frame), e.line);
      case Expr::Type::Compare: {
        Value left = eval(*e.args[0], frame);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1], frame);
          if (!compare_op(e.ops[i], left, right, e.line)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Type::Cond:
        if (eval(*e.args[0], frame).truthy()) return eval(*e.args[1], frame);
        return e.args[2] ? eval(*e.args[2], frame) : Value::undefined("");
      case Expr::Type::List:
      case Expr::Type::Tuple: {
        Value::List items;
        for (const auto& a : e.args) items.push_back(eval(*a, frame));
        return e.type == Expr::Type::Tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      case Expr::Type::Dict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i], frame);
          d.set(dict_key(k), eval(*e.args[i + 1], frame));
        }
        return d;
      }
    }
    fail("unknown expression", e.line);
  }

  Frame& root_;
  int64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

Template::Template(std::string_view source) : parsed_(std::make_unique<Parsed>()) {
  parsed_->body = parse_template(source);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Value::Dict& variables, std::time_t now) const {
  Frame globals_frame{globals(now), nullptr};
  Frame root{variables, &globals_frame};
  std::string out;
  Renderer(root).exec(parsed_->body, root, out);
  return out;
}

}  // namespace squeeze::jinja
