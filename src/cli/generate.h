// The generation loop shared by `run` and `chat`: prompt prefill, then sample and decode.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/context.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::cli {

struct GenerationStats {
  int64_t n_prompt = 0;
  double prompt_seconds = 0;
  int64_t n_generated = 0;
  double gen_seconds = 0;
  std::string stop_reason;  // "eog" (end-of-generation token), "length" (-n reached), "context"

  // "prompt: 12 tokens, 350.1 t/s | generation: 64 tokens, 120.3 t/s | stop: length"
  std::string summary() const;
};

// Appends `prompt` to the context, then generates up to n_predict tokens (< 0: until an
// end-of-generation token or the context is full). Each piece of complete UTF-8 text goes to
// on_text; generated tokens (the end-of-generation token excluded) are appended to `out`.
GenerationStats generate(model::Context& ctx, const tokenizer::Tokenizer& tok,
                         sample::Sampler& sampler, std::span<const int32_t> prompt,
                         int64_t n_predict, const std::function<void(std::string_view)>& on_text,
                         std::vector<int32_t>* out = nullptr);

}  // namespace squeeze::cli
