#include "eval/passkey.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"

namespace squeeze::eval {

namespace {

constexpr const char* kHeader =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
    "it. I will quiz you about the important information there.\n";
constexpr const char* kFiller =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
constexpr const char* kQuestion = "\nWhat is the pass key? The pass key is";

std::string key_line(int key) {
  const std::string k = std::to_string(key);
  return "The pass key is " + k + ". Remember it. " + k + " is the pass key. ";
}

std::string text_of(int key, double depth, int64_t n_filler) {
  const auto before = static_cast<int64_t>(std::lround(depth * static_cast<double>(n_filler)));
  std::string s = kHeader;
  for (int64_t i = 0; i < n_filler; ++i) {
    if (i == before) s += key_line(key);
    s += kFiller;
  }
  if (before >= n_filler) s += key_line(key);
  return s + kQuestion;
}

}  // namespace

std::vector<int32_t> passkey_prompt(const tokenizer::Tokenizer& tok, int key, double depth,
                                    int64_t max_tokens) {
  auto encode = [&](int64_t n) { return tok.encode(text_of(key, depth, n), true, false); };
  const auto bare = static_cast<int64_t>(encode(0).size());
  if (bare > max_tokens) {
    throw UsageError("the passkey question alone takes " + std::to_string(bare) +
                     " tokens, more than the " + std::to_string(max_tokens) + " available");
  }
  const auto per = static_cast<int64_t>(encode(1).size()) - bare;
  int64_t n = std::max<int64_t>(0, (max_tokens - bare) / std::max<int64_t>(per, 1));
  std::vector<int32_t> ids = encode(n);
  while (n > 0 && static_cast<int64_t>(ids.size()) > max_tokens) ids = encode(--n);
  return ids;
}

bool answer_has_key(const std::string& answer, int key) {
  const auto first = std::find_if(answer.begin(), answer.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  const auto last = std::find_if(first, answer.end(), [](char c) { return !std::isdigit(static_cast<unsigned char>(c)); });
  return first != answer.end() && std::string(first, last) == std::to_string(key);
}

std::vector<double> passkey_depths(const PasskeyOptions& o) {
  if (o.depths < 1 || o.trials < 1 || o.n_answer < 1) {
    throw UsageError("--depths, --trials and --answer-tokens must be at least 1");
  }
  if (o.depths == 1) return {0.5};
  std::vector<double> d;
  for (int i = 0; i < o.depths; ++i) d.push_back(static_cast<double>(i) / (o.depths - 1));
  return d;
}

PasskeyTrial run_passkey_trial(model::Context& ctx, const tokenizer::Tokenizer& tok, int key,
                               double depth, int64_t n_answer) {
  ctx.reset();
  PasskeyTrial r;
  r.depth = depth;
  r.key = key;
  const std::vector<int32_t> prompt = passkey_prompt(tok, key, depth, ctx.n_ctx() - n_answer);
  r.n_prompt = static_cast<int64_t>(prompt.size());
  std::span<const float> logits = ctx.decode(prompt);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n_answer; ++i) {
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (tok.is_eog(next)) break;
    out.push_back(next);
    if (i + 1 < n_answer) logits = ctx.decode(std::span<const int32_t>(&out.back(), 1));
  }
  r.answer = tok.decode(out);
  r.correct = answer_has_key(r.answer, key);
  return r;
}

}  // namespace squeeze::eval
