// Jinja's filters, tests, globals and the Python str / dict / list methods that chat templates
// call, over jinja::Value (jinja_builtins.cpp).
#pragma once

#include <ctime>
#include <string_view>

#include "tokenizer/jinja_value.h"

namespace squeeze::jinja {

// value | name(args). Throws Error for an unknown filter (when it is reached, as jinja2 does for a
// filter inside an if block) and for bad arguments.
Value apply_filter(std::string_view name, const Value& value, Args& args);
// value is name(args).
bool apply_test(std::string_view name, const Value& value, Args& args);

// obj.name as jinja2's sandbox resolves it: a method of str / dict / list bound to obj, else the
// dict's item, else Undefined. Reading an attribute of Undefined is an error.
Value get_attr(const Value& obj, std::string_view name);
// obj[key]: list / string index (negative from the end), dict key; Undefined where missing.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] of a list or a string (code points), null parts given as Undefined.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// range, namespace, dict, raise_exception, strftime_now (formatting `now` as local time).
Value::Dict globals(std::time_t now);

// Python's len() of a string (code points), list or dict; throws for other types.
int64_t length(const Value& v);
// The items a for loop walks: a list's items, a dict's keys, a string's characters; Undefined
// gives none. Throws for other types.
Value::List iterate(const Value& v);

}  // namespace squeeze::jinja
