// The values a Jinja template computes with: Python's None, bool, int, float, str, list and
// dict, Jinja's Undefined, and callables (macros, builtins, bound methods). Lists and dicts are
// shared by reference as in Python (so that `ns.x = ...` on a namespace() and `list.append`
// change the one object); dicts keep insertion order. Printing, comparison and truthiness follow
// Python's rules, since chat templates are written against Python jinja2.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace squeeze::jinja {

class Value;

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };
  using List = std::vector<Value>;
  using Dict = std::vector<std::pair<std::string, Value>>;
  using Function = std::function<Value(Args&)>;

  Value() = default;  // Undefined
  static Value none();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double f);
  Value(std::string s);
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(List items = {});
  // A Python tuple: a list that prints as (a, b) and is not equal to a list.
  static Value tuple(List items);
  static Value dict(Dict items = {});
  static Value function(Function f);
  // A Jinja namespace(): a dict whose attributes may be assigned.
  static Value make_namespace(Dict items);
  // An Undefined that remembers the name that was missing (for the error when it is used).
  static Value undefined(std::string what);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Dict && is_ns_; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_number() const { return kind_ == Kind::Float ? f_ : static_cast<double>(i_); }
  const std::string& as_string() const { return s_; }  // the string, or the Undefined's name
  List& as_list() const { return *list_; }
  Dict& as_dict() const { return *dict_; }
  const Function& as_function() const { return *fn_; }

  // The dict's value under key, or nullptr.
  Value* find(std::string_view key) const;
  void set(std::string_view key, Value v) const;  // dicts only

  bool truthy() const;
  // Python's str(): what {{ x }} prints. Undefined prints "".
  std::string str() const;
  // Python's repr(), as str() of a list prints its items.
  std::string repr() const;
  // JSON text as json.dumps(x, ensure_ascii=False, indent=indent, separators=...) writes it
  // (indent < 0: on one line). Throws Error for values JSON has no form for.
  std::string to_json(int indent, std::string_view item_sep, std::string_view key_sep) const;
  std::string_view type_name() const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  bool is_ns_ = false;
  bool is_tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

// Dict keys are strings; an integer key ({0: 'a'}, as templates write lookup tables) is kept as
// "\x01" and its decimal digits. dict_key: a key's stored form (Error for other kinds of key);
// key_value: the key as the template sees it.
std::string dict_key(const Value& key);
Value key_value(const std::string& stored);

// Python's ordering of two numbers or two strings (-1, 0, 1); throws Error for other pairs.
int compare(const Value& a, const Value& b);

}  // namespace squeeze::jinja
