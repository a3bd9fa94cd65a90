// A Jinja engine for chat templates: the subset of Jinja2 that real models' templates use,
// rendered as Hugging Face's apply_chat_template renders them with Python jinja2 (trim_blocks,
// lstrip_blocks, loop controls, raise_exception, strftime_now, tojson without HTML escaping).
//
// Supported: {{ }}, {% if/elif/else %}, {% for x[, y] in ... [if ...] %} with loop.* and
// {% else %}, {% break %} / {% continue %}, {% set %} (names, namespace attributes, tuples,
// blocks), {% macro %}, comments, whitespace control (-, +); Python literals, arithmetic,
// comparison, `in`, `~`, conditional expressions, attribute and item access, slices; the
// filters, tests and str / dict / list methods templates use (jinja_builtins.cpp lists them).
// Anything else -- an unknown tag, filter, test or method -- is an Error when the template is
// parsed or the construct is reached: never a silently different prompt. Checked against jinja2's
// renderings of llama.cpp's 66 real templates (tests/tokenizer/jinja_fixture_test.cpp).
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/jinja_value.h"

namespace squeeze::jinja {

struct Stmt;

class Template {
 public:
  // Throws Error ("jinja: ... (line N)") for a syntax error or an unsupported tag.
  explicit Template(std::string_view source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the given variables (messages, bos_token, add_generation_prompt, ...) and the
  // globals range, namespace, dict, raise_exception and strftime_now (which formats `now`, local
  // time). Throws Error for raise_exception(...) (its message) and for errors of evaluation.
  std::string render(const Value::Dict& variables, std::time_t now) const;

 private:
  struct Parsed;
  std::unique_ptr<Parsed> parsed_;
};

}  // namespace squeeze::jinja
