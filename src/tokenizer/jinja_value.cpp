#include "tokenizer/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace squeeze::jinja {
namespace {

// Python's repr() of a float: the shortest digits that read back to it, positional for
// exponents -5 < e < 16 (with ".0" when integral), scientific (1e-05, 1e+16) otherwise.
std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // d[.ddd]e[+-]XX
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  std::string mant = sci.substr(0, e);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ex[16];
    std::snprintf(ex, sizeof ex, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += ex;
  } else if (exp < 0) {
    out = "0.";
    out.append(static_cast<size_t>(-exp - 1), '0');
    out += digits;
  } else {
    const size_t int_digits = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_digits) {
      out = digits + std::string(int_digits - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, int_digits) + "." + digits.substr(int_digits);
    }
  }
  if (neg) out.insert(out.begin(), '-');
  return out;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char quote = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\' || c == quote) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\u%04x", c);
          out += esc;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

void to_json(const Value& v, int indent, int depth, std::string_view item_sep,
             std::string_view key_sep, std::string& out) {
  const auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double f = v.as_number();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f < 0 ? "-Infinity" : "Infinity") : float_repr(f);
      return;
    }
    case Value::Kind::String: out += json_string(v.as_string()); return;
    case Value::Kind::List: {
      const auto& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        to_json(items[i], indent, depth + 1, item_sep, key_sep, out);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      const auto& items = v.as_dict();
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        if (indent >= 0) newline(depth + 1);
        out += json_string(key_value(items[i].first).str());  // json.dumps writes int keys as strings
        out += key_sep;
        to_json(items[i].second, indent, depth + 1, item_sep, key_sep, out);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::Undefined:
    case Value::Kind::Function:
      throw Error("jinja: tojson: an object of type " + std::string(v.type_name()) +
                  " is not JSON serializable");
  }
}

}  // namespace

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value::Value(bool b) : kind_(Kind::Bool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::Int), i_(i) {}
Value::Value(double f) : kind_(Kind::Float), f_(f) {}
Value::Value(std::string s) : kind_(Kind::String), s_(std::move(s)) {}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.is_tuple_ = true;
  return v;
}

Value Value::dict(Dict items) {
  Value v;
  v.kind_ = Kind::Dict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::make_namespace(Dict items) {
  Value v = dict(std::move(items));
  v.is_ns_ = true;
  return v;
}

Value Value::function(Function f) {
  Value v;
  v.kind_ = Kind::Function;
  v.fn_ = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::undefined(std::string what) {
  Value v;
  v.s_ = std::move(what);
  return v;
}

Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::Dict) return nullptr;
  for (auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::set(std::string_view key, Value v) const {
  if (Value* slot = find(key)) {
    *slot = std::move(v);
  } else {
    dict_->emplace_back(std::string(key), std::move(v));
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0;
    case Kind::String: return !s_.empty();
    case Kind::List: return !list_->empty();
    case Kind::Dict: return is_ns_ || !dict_->empty();
    case Kind::Function: return true;
  }
  return false;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::String: return s_;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return b_ ? "True" : "False";
    case Kind::Int: return std::to_string(i_);
    case Kind::Float: return float_repr(f_);
    case Kind::String: return string_repr(s_);
    case Kind::List: {
      std::string out = is_tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      if (is_tuple_) return out + (list_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::Dict: {
      if (is_ns_) return "<Namespace>";
      std::string out = "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        out += (i ? ", " : "") + key_value((*dict_)[i].first).repr() + ": " + (*dict_)[i].second.repr();
      }
      return out + "}";
    }
    case Kind::Function: return "<function>";
  }
  return "";
}

std::string Value::to_json(int indent, std::string_view item_sep, std::string_view key_sep) const {
  std::string out;
  jinja::to_json(*this, indent, 0, item_sep, key_sep, out);
  return out;
}

std::string_view Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Dict: return is_ns_ ? "Namespace" : "dict";
    case Kind::Function: return "function";
  }
  return "?";
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind_ == Value::Kind::Int && b.kind_ == Value::Kind::Int) return a.i_ == b.i_;
    return a.as_number() == b.as_number();
  }
  // Python: True == 1 and False == 0.
  if (a.kind_ == Value::Kind::Bool && b.is_number()) return Value(int64_t{a.b_}) == b;
  if (b.kind_ == Value::Kind::Bool && a.is_number()) return a == Value(int64_t{b.b_});
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::Bool: return a.b_ == b.b_;
    case Value::Kind::String: return a.s_ == b.s_;
    case Value::Kind::List: return a.is_tuple_ == b.is_tuple_ && *a.list_ == *b.list_;
    case Value::Kind::Dict: {
      if (a.dict_ == b.dict_) return true;
      if (a.is_ns_ || b.is_ns_ || a.dict_->size() != b.dict_->size()) return false;
      for (const auto& [k, v] : *a.dict_) {
        const Value* other = b.find(k);
        if (other == nullptr || !(*other == v)) return false;
      }
      return true;
    }
    case Value::Kind::Function: return a.fn_ == b.fn_;
    default: return false;
  }
}

std::string dict_key(const Value& key) {
  if (key.is_string()) return key.as_string();
  if (key.kind() == Value::Kind::Int) {
    std::string stored(1, '\x01');
    stored += std::to_string(key.as_int());
    return stored;
  }
  throw Error("jinja: dict keys must be strings or integers here, not " + std::string(key.type_name()));
}

Value key_value(const std::string& stored) {
  if (!stored.empty() && stored[0] == '\x01') return Value(static_cast<int64_t>(std::stoll(stored.substr(1))));
  return Value(stored);
}

int compare(const Value& a, const Value& b) {
  const auto num = [](const Value& v) {
    return v.is_number() || v.kind() == Value::Kind::Bool;
  };
  if (num(a) && num(b)) {
    const double x = a.kind() == Value::Kind::Bool ? a.as_bool() : a.as_number();
    const double y = b.kind() == Value::Kind::Bool ? b.as_bool() : b.as_number();
    if (a.kind() == Value::Kind::Int && b.kind() == Value::Kind::Int) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order = code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  throw Error("jinja: cannot order " + std::string(a.type_name()) + " and " + std::string(b.type_name()));
}

}  // namespace squeeze::jinja
