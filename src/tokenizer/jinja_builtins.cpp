#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "core/error.h"
#include "tokenizer/jinja_strings.h"

namespace squeeze::jinja {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error("jinja: " + what); }

// The argument at position i or under `name`, or Undefined.
const Value& arg(const Args& a, size_t i, std::string_view name) {
  static const Value kUndefined;
  if (i < a.positional.size()) return a.positional[i];
  for (const auto& [k, v] : a.keyword) {
    if (k == name) return v;
  }
  return kUndefined;
}

int64_t int_arg(const Args& a, size_t i, std::string_view name, int64_t def) {
  const Value& v = arg(a, i, name);
  if (v.is_undefined() || v.is_none()) return def;
  if (v.kind() != Value::Kind::Int) fail(std::string(name) + " must be an integer");
  return v.as_int();
}

const std::string& str_arg(const Args& a, size_t i, std::string_view name) {
  const Value& v = arg(a, i, name);
  if (!v.is_string()) fail(std::string(name) + " must be a string, not " + std::string(v.type_name()));
  return v.as_string();
}

Value method(const Value& self, std::string_view name) {
  const std::string n(name);
  if (self.is_string()) {
    static const std::set<std::string, std::less<>> kStr = {
        "strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper", "lower", "replace",
        "title", "capitalize", "find", "count", "join", "format", "isdigit", "isspace"};
    if (!kStr.count(name)) return Value::undefined(n);
    return Value::function([self, n](Args& a) -> Value {
      const std::string& s = self.as_string();
      if (n == "strip") return Value(strip(s, arg(a, 0, "chars"), true, true));
      if (n == "lstrip") return Value(strip(s, arg(a, 0, "chars"), true, false));
      if (n == "rstrip") return Value(strip(s, arg(a, 0, "chars"), false, true));
      if (n == "split") return split(s, arg(a, 0, "sep"), int_arg(a, 1, "maxsplit", -1));
      if (n == "startswith" || n == "endswith") {
        const Value& p = arg(a, 0, "prefix");
        std::vector<std::string> options;
        if (p.is_list()) {
          for (const Value& o : p.as_list()) options.push_back(o.is_string() ? o.as_string() : "");
        } else {
          options.push_back(str_arg(a, 0, "prefix"));
        }
        for (const auto& o : options) {
          if (n == "startswith" ? s.starts_with(o) : s.ends_with(o)) return Value(true);
        }
        return Value(false);
      }
      if (n == "upper") return Value(upper(s));
      if (n == "lower") return Value(lower(s));
      if (n == "title") return Value(change_case(s, Case::Title));
      if (n == "capitalize") return Value(change_case(s, Case::Capitalize));
      if (n == "replace") return Value(replace(s, str_arg(a, 0, "old"), str_arg(a, 1, "new"), int_arg(a, 2, "count", -1)));
      if (n == "find") {
        const size_t at = s.find(str_arg(a, 0, "sub"));
        return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(code_points(s.substr(0, at)).size()));
      }
      if (n == "count") {
        const std::string& sub = str_arg(a, 0, "sub");
        if (sub.empty()) return Value(static_cast<int64_t>(code_points(s).size() + 1));
        int64_t k = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++k;
        return Value(k);
      }
      if (n == "join") {
        std::string out;
        const Value& items = arg(a, 0, "iterable");
        bool first = true;
        for (const Value& v : iterate(items)) {
          if (!v.is_string()) fail("join: expected str instance, " + std::string(v.type_name()) + " found");
          if (!first) out += s;
          out += v.as_string();
          first = false;
        }
        return Value(out);
      }
      if (n == "isdigit" || n == "isspace") {
        if (s.empty()) return Value(false);
        for (char c : s) {
          const auto u = static_cast<unsigned char>(c);
          if (n == "isdigit" ? !std::isdigit(u) : !std::isspace(u)) return Value(false);
        }
        return Value(true);
      }
      return Value(format(s, a));
    });
  }
  if (self.is_dict() && !self.is_namespace()) {
    if (name != "get" && name != "items" && name != "keys" && name != "values") {
      if (name == "pop" || name == "update" || name == "setdefault" || name == "clear" || name == "popitem") {
        fail("access to attribute '" + n + "' of 'dict' object is unsafe (templates cannot modify their input)");
      }
      return Value::undefined(n);
    }
    return Value::function([self, n](Args& a) -> Value {
      if (n == "get") {
        const Value& key = arg(a, 0, "key");
        if (key.is_string() || key.kind() == Value::Kind::Int) {
          if (const Value* v = self.find(dict_key(key))) return *v;
        }
        const Value& d = arg(a, 1, "default");
        return d.is_undefined() ? Value::none() : d;
      }
      Value::List out;
      for (const auto& [k, v] : self.as_dict()) {
        if (n == "items") out.push_back(Value::tuple({key_value(k), v}));
        if (n == "keys") out.push_back(key_value(k));
        if (n == "values") out.push_back(v);
      }
      return Value::list(std::move(out));
    });
  }
  if (self.is_list()) {
    if (name == "append" || name == "pop" || name == "extend" || name == "insert" || name == "remove" ||
        name == "clear" || name == "sort" || name == "reverse") {
      fail("access to attribute '" + n + "' of 'list' object is unsafe (templates cannot modify their input)");
    }
  }
  return Value::undefined(n);
}

Value filter_tojson(const Value& v, const Args& a) {
  const Value& indent = arg(a, 1, "indent");
  const int ind = indent.kind() == Value::Kind::Int ? static_cast<int>(indent.as_int()) : -1;
  std::string item_sep = ind >= 0 ? "," : ", ";
  std::string key_sep = ": ";
  const Value& seps = arg(a, 2, "separators");
  if (seps.is_list() && seps.as_list().size() == 2 && seps.as_list()[0].is_string() && seps.as_list()[1].is_string()) {
    item_sep = seps.as_list()[0].as_string();
    key_sep = seps.as_list()[1].as_string();
  }
  const Value& ensure_ascii = arg(a, 0, "ensure_ascii");
  if (ensure_ascii.truthy()) fail("tojson: ensure_ascii=True is not supported");
  if (arg(a, 3, "sort_keys").truthy()) fail("tojson: sort_keys is not supported");
  return Value(v.to_json(ind, item_sep, key_sep));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// selectattr / rejectattr / select / reject: the items whose (attribute) passes the test.
Value select(const Value& v, const Args& a, bool by_attr, bool keep) {
  size_t next = 0;
  std::string attr;
  if (by_attr) attr = str_arg(a, next++, "attribute");
  std::string test;
  Args test_args;
  if (next < a.positional.size()) {
    test = str_arg(a, next++, "test");
    test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next), a.positional.end());
  }
  Value::List out;
  if (!v.truthy()) return Value::list();  // jinja2 selects from a falsy value (None) nothing
  for (const Value& item : iterate(v)) {
    const Value x = by_attr ? get_attr(item, attr) : item;
    const bool pass = test.empty() ? x.truthy() : apply_test(test, x, test_args);
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

int compare_for_sort(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) return compare(Value(lower(a.as_string())), Value(lower(b.as_string())));
  return compare(a, b);
}

}  // namespace

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return static_cast<int64_t>(code_points(v.as_string()).size());
    case Value::Kind::List: return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.as_dict().size());
    default: fail("object of type '" + std::string(v.type_name()) + "' has no len()");
  }
}

Value::List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return v.as_list();
    case Value::Kind::Dict: {
      if (v.is_namespace()) break;
      Value::List keys;
      for (const auto& [k, x] : v.as_dict()) keys.push_back(key_value(k));
      return keys;
    }
    case Value::Kind::String: {
      Value::List chars;
      for (std::string_view cp : code_points(v.as_string())) chars.emplace_back(cp);
      return chars;
    }
    default: break;
  }
  fail("'" + std::string(v.type_name()) + "' object is not iterable");
}

Value get_attr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) {
    fail("'" + (obj.as_string().empty() ? std::string("value") : obj.as_string()) + "' is undefined (reading ." +
         std::string(name) + ")");
  }
  Value m = method(obj, name);
  if (!m.is_undefined()) return m;
  if (const Value* v = obj.find(name)) return *v;
  return Value::undefined(std::string(name));
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail("'" + (obj.as_string().empty() ? std::string("value") : obj.as_string()) + "' is undefined (reading [" + key.repr() + "])");
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.find(key.as_string())) return *v;
      return method(obj, key.as_string());  // jinja2 falls back to the attribute: d['items']
    }
    if (key.kind() == Value::Kind::Int) {
      if (const Value* v = obj.find(dict_key(key))) return *v;
    }
    return Value::undefined(key.repr());
  }
  if ((obj.is_list() || obj.is_string()) && key.kind() == Value::Kind::Int) {
    const int64_t n = length(obj);
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined(key.repr());
    if (obj.is_list()) return obj.as_list()[static_cast<size_t>(i)];
    return Value(std::string(code_points(obj.as_string())[static_cast<size_t>(i)]));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(key.repr());
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (!obj.is_list() && !obj.is_string()) {
    if (obj.is_undefined()) fail("'" + obj.as_string() + "' is undefined (slicing it)");
    return Value::undefined("slice");
  }
  const auto get = [](const Value& v, int64_t def) {
    if (v.is_undefined() || v.is_none()) return def;
    if (v.kind() != Value::Kind::Int) fail("slice indices must be integers or None");
    return v.as_int();
  };
  const int64_t n = length(obj);
  const int64_t st = get(step, 1);
  if (st == 0) fail("slice step cannot be zero");
  // Python's slice.indices().
  const auto clamp = [&](int64_t i, bool is_start) {
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    (void)is_start;
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = start.is_undefined() || start.is_none() ? (st > 0 ? 0 : n - 1) : clamp(get(start, 0), true);
  const int64_t e = stop.is_undefined() || stop.is_none() ? (st > 0 ? n : -1) : clamp(get(stop, 0), false);
  std::vector<size_t> picks;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(static_cast<size_t>(i));
  if (obj.is_list()) {
    Value::List out;
    for (size_t i : picks) out.push_back(obj.as_list()[i]);
    return Value::list(std::move(out));
  }
  const auto cps = code_points(obj.as_string());
  std::string out;
  for (size_t i : picks) out += cps[i];
  return Value(out);
}

Value apply_filter(std::string_view name, const Value& v, Args& a) {
  if (name == "length" || name == "count") return Value(length(v));
  if (name == "trim") return Value(strip(v.str(), arg(a, 0, "chars"), true, true));
  if (name == "upper") return Value(upper(v.str()));
  if (name == "lower") return Value(lower(v.str()));
  if (name == "capitalize") return Value(change_case(v.str(), Case::Capitalize));
  if (name == "title") return Value(change_case(v.str(), Case::Title));
  if (name == "string") return Value(v.str());
  if (name == "safe") return v;
  if (name == "escape" || name == "e") return Value(html_escape(v.str()));
  if (name == "tojson") return filter_tojson(v, a);
  if (name == "int") {
    if (v.kind() == Value::Kind::Int) return v;
    if (v.kind() == Value::Kind::Float) return Value(static_cast<int64_t>(v.as_number()));
    if (v.kind() == Value::Kind::Bool) return Value(int64_t{v.as_bool()});
    if (v.is_string()) {
      try {
        size_t used = 0;
        const std::string s = strip(v.as_string(), Value::none(), true, true);
        const int64_t i = std::stoll(s, &used);
        if (used == s.size()) return Value(i);
      } catch (const std::exception&) {
      }
    }
    return Value(int_arg(a, 0, "default", 0));
  }
  if (name == "float") {
    if (v.is_number()) return Value(v.as_number());
    if (v.is_string()) {
      try {
        return Value(std::stod(v.as_string()));
      } catch (const std::exception&) {
      }
    }
    return Value(0.0);
  }
  if (name == "default" || name == "d") {
    const bool boolean = arg(a, 1, "boolean").truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) {
      const Value& d = arg(a, 0, "default_value");
      return d.is_undefined() ? Value(std::string()) : d;
    }
    return v;
  }
  if (name == "join") {
    const Value& sep = arg(a, 0, "d");
    const Value& attr = arg(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep.is_undefined() ? "" : sep.str();
      out += (attr.is_undefined() ? item : get_attr(item, attr.str())).str();
      first = false;
    }
    return Value(out);
  }
  if (name == "first" || name == "last") {
    const Value::List items = iterate(v);
    if (items.empty()) return Value::undefined(std::string(name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) return get_slice(v, Value(), Value(), Value(int64_t{-1}));
    Value::List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "list") return Value::list(iterate(v));
  if (name == "items") {
    if (v.is_undefined()) return Value::list();
    if (!v.is_dict()) fail("items: expected a mapping, got " + std::string(v.type_name()));
    Value::List out;
    for (const auto& [k, x] : v.as_dict()) out.push_back(Value::tuple({key_value(k), x}));
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_dict()) fail("dictsort: expected a mapping, got " + std::string(v.type_name()));
    const bool case_sensitive = arg(a, 0, "case_sensitive").truthy();
    const Value& by = arg(a, 1, "by");
    const bool by_value = by.is_string() && by.as_string() == "value";
    const bool rev = arg(a, 2, "reverse").truthy();
    Value::List out;
    for (const auto& [k, x] : v.as_dict()) out.push_back(Value::tuple({key_value(k), x}));
    std::stable_sort(out.begin(), out.end(), [&](const Value& p, const Value& q) {
      const int c = compare_for_sort(p.as_list()[by_value], q.as_list()[by_value], case_sensitive);
      return rev ? c > 0 : c < 0;
    });
    return Value::list(std::move(out));
  }
  if (name == "sort") {
    Value::List items = iterate(v);
    const bool rev = arg(a, 0, "reverse").truthy();
    const bool case_sensitive = arg(a, 1, "case_sensitive").truthy();
    const Value& attr = arg(a, 2, "attribute");
    std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
      const Value& x = attr.is_undefined() ? p : get_attr(p, attr.str());
      const Value& y = attr.is_undefined() ? q : get_attr(q, attr.str());
      const int c = compare_for_sort(x, y, case_sensitive);
      return rev ? c > 0 : c < 0;
    });
    return Value::list(std::move(items));
  }
  if (name == "unique") {
    Value::List out;
    for (const Value& item : iterate(v)) {
      if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
    }
    return Value::list(std::move(out));
  }
  if (name == "selectattr") return select(v, a, true, true);
  if (name == "rejectattr") return select(v, a, true, false);
  if (name == "select") return select(v, a, false, true);
  if (name == "reject") return select(v, a, false, false);
  if (name == "map") {
    Value::List out;
    if (!v.truthy()) return Value::list();  // as jinja2: None maps to nothing
    const Value& attr = arg(a, 99, "attribute");
    if (!attr.is_undefined()) {
      const Value& def = arg(a, 99, "default");
      for (const Value& item : iterate(v)) {
        Value x = get_attr(item, attr.str());
        out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
      }
      return Value::list(std::move(out));
    }
    const std::string& filter = str_arg(a, 0, "filter");
    if (filter == "map") fail("map: mapping with 'map' itself is not supported");
    Args rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const Value& item : iterate(v)) out.push_back(apply_filter(filter, item, rest));
    return Value::list(std::move(out));
  }
  if (name == "replace") {
    return Value(replace(v.str(), arg(a, 0, "old").str(), arg(a, 1, "new").str(), int_arg(a, 2, "count", -1)));
  }
  if (name == "abs") {
    if (v.kind() == Value::Kind::Int) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.kind() == Value::Kind::Float) return Value(std::fabs(v.as_number()));
    fail("abs: bad operand type " + std::string(v.type_name()));
  }
  if (name == "round") {
    if (!v.is_number()) fail("round: expected a number");
    const double p = std::pow(10.0, static_cast<double>(int_arg(a, 0, "precision", 0)));
    const Value& m = arg(a, 1, "method");
    const std::string method = m.is_string() ? m.as_string() : "common";
    const double x = v.as_number() * p;
    const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    return Value(r / p);
  }
  if (name == "wordcount") return Value(length(split(v.str(), Value::none(), -1)));
  if (name == "indent") {
    const Value& w = arg(a, 0, "width");
    const std::string pad = w.is_string() ? w.as_string() : std::string(static_cast<size_t>(int_arg(a, 0, "width", 4)), ' ');
    const bool first = arg(a, 1, "first").truthy();
    const bool blank = arg(a, 2, "blank").truthy();
    const std::string s = v.str();
    std::string out;
    size_t from = 0;
    bool is_first = true;
    while (true) {
      const size_t nl = s.find('\n', from);
      const std::string line = s.substr(from, nl == std::string::npos ? std::string::npos : nl - from);
      if ((is_first ? first : true) && (blank || !line.empty())) out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      from = nl + 1;
      is_first = false;
    }
    return Value(out);
  }
  if (name == "min" || name == "max" || name == "sum") {
    const Value::List items = iterate(v);
    if (name == "sum") {
      Value total(int64_t{0});
      bool is_float = false;
      double f = 0;
      int64_t i = 0;
      for (const Value& x : items) {
        if (!x.is_number()) fail("sum: unsupported operand type " + std::string(x.type_name()));
        if (x.kind() == Value::Kind::Float) is_float = true;
        f += x.as_number();
        if (x.kind() == Value::Kind::Int) i += x.as_int();
      }
      return is_float ? Value(f) : Value(i);
    }
    if (items.empty()) return Value::undefined(std::string(name));
    Value best = items[0];
    for (const Value& x : items) {
      const int c = compare_for_sort(x, best, false);
      if (name == "min" ? c < 0 : c > 0) best = x;
    }
    return best;
  }
  fail("unsupported filter '" + std::string(name) + "'");
}

bool apply_test(std::string_view name, const Value& v, Args& a) {
  const Value& other = arg(a, 0, "other");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == Value::Kind::Int;
  if (name == "float") return v.kind() == Value::Kind::Float;
  if (name == "boolean") return v.kind() == Value::Kind::Bool;
  if (name == "true") return v.kind() == Value::Kind::Bool && v.as_bool();
  if (name == "false") return v.kind() == Value::Kind::Bool && !v.as_bool();
  if (name == "mapping") return v.is_dict() && !v.is_namespace();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "callable") return v.is_function();
  if (name == "eq" || name == "equalto" || name == "==") return v == other;
  if (name == "ne" || name == "!=") return !(v == other);
  if (name == "lt" || name == "<") return compare(v, other) < 0;
  if (name == "le" || name == "<=") return compare(v, other) <= 0;
  if (name == "gt" || name == ">") return compare(v, other) > 0;
  if (name == "ge" || name == ">=") return compare(v, other) >= 0;
  if (name == "sameas") return v == other && v.kind() == other.kind();
  if (name == "in") {
    const Value& seq = arg(a, 0, "seq");
    for (const Value& x : iterate(seq)) {
      if (x == v) return true;
    }
    return seq.is_string() && v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind() != Value::Kind::Int) fail(std::string(name) + ": expected an integer");
    if (name == "divisibleby") {
      const int64_t d = int_arg(a, 0, "num", 1);
      if (d == 0) fail("divisibleby 0");
      return v.as_int() % d == 0;
    }
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "lower") return v.is_string() && lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && upper(v.as_string()) == v.as_string();
  fail("unsupported test '" + std::string(name) + "'");
}

Value::Dict globals(std::time_t now) {
  Value::Dict g;
  g.emplace_back("range", Value::function([](Args& a) -> Value {
    if (a.positional.empty() || a.positional.size() > 3) fail("range expects 1 to 3 arguments");
    for (const Value& x : a.positional) {
      if (x.kind() != Value::Kind::Int) fail("range: arguments must be integers");
    }
    int64_t start = 0;
    int64_t stop = a.positional[0].as_int();
    int64_t step = 1;
    if (a.positional.size() >= 2) {
      start = a.positional[0].as_int();
      stop = a.positional[1].as_int();
    }
    if (a.positional.size() == 3) step = a.positional[2].as_int();
    if (step == 0) fail("range() arg 3 must not be zero");
    Value::List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 1000000) fail("range: too many items");
      out.emplace_back(i);
    }
    return Value::list(std::move(out));
  }));
  const auto make_dict = [](Args& a, bool ns) {
    Value::Dict items;
    for (const Value& p : a.positional) {
      if (!p.is_dict()) fail("namespace() / dict() take a mapping or keyword arguments");
      for (const auto& kv : p.as_dict()) items.push_back(kv);
    }
    for (auto& kv : a.keyword) items.push_back(kv);
    return ns ? Value::make_namespace(std::move(items)) : Value::dict(std::move(items));
  };
  g.emplace_back("namespace", Value::function([make_dict](Args& a) { return make_dict(a, true); }));
  g.emplace_back("dict", Value::function([make_dict](Args& a) { return make_dict(a, false); }));
  g.emplace_back("raise_exception", Value::function([](Args& a) -> Value {
    throw Error("the chat template refused these messages: " + arg(a, 0, "message").str());
  }));
  g.emplace_back("strftime_now", Value::function([now](Args& a) -> Value {
    const std::string& fmt = str_arg(a, 0, "format");
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    if (n == 0 && !fmt.empty()) fail("strftime_now: format too long or empty result");
    return Value(std::string(buf, n));
  }));
  return g;
}

}  // namespace squeeze::jinja
