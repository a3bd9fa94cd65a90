// What a front end needs to generate text, set up once from the options every generating
// command takes: the model, its tokenizer, a thread pool, a context (KV cache), the optional
// activation-sparsity policy and a sampler; and the generation loop (prompt prefill, then
// sample and decode). `squeeze run` and `squeeze chat` are its clients.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "model/act_sparsity.h"
#include "model/context.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::serve {

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

struct GeneratorOptions {
  std::string model_path;
  int64_t n_ctx = 2048;
  int threads = 1;
  std::optional<double> act_sparsity;   // a level of the file's table (model/act_sparsity.h)
  std::optional<double> head_sparsity;  // with act_sparsity, TEAL tables only
  kv::KvOptions kv{};                   // the KV cache's storage
  kv::EvictOptions evict{};             // token eviction (kv/evict.h)
  sample::SamplerParams sampling;
};

class Generator {
 public:
  // Loads the model and sets everything up. Throws Error (FormatError, UsageError) for a bad
  // file, a context beyond the model's, or sparsity levels the file does not hold.
  explicit Generator(const GeneratorOptions& o);
  // The same with a model already loaded (o.model_path unused): a per-domain model
  // (compress/domains.h).
  Generator(const GeneratorOptions& o, std::unique_ptr<model::Model> model);
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  const GeneratorOptions& options() const { return options_; }  // the seed drawn, if it was
  const model::Model& model() const { return *model_; }
  const tokenizer::Tokenizer& tokenizer() const { return tok_; }
  ThreadPool& pool() { return pool_; }
  model::Context& context() { return ctx_; }
  sample::Sampler& sampler() { return sampler_; }
  const model::ActSparsity* act_sparsity() const { return sparsity_.get(); }

  // generate() on this generator's context, tokenizer and sampler.
  GenerationStats generate(std::span<const int32_t> prompt, int64_t n_predict,
                           const std::function<void(std::string_view)>& on_text,
                           std::vector<int32_t>* out = nullptr) {
    return serve::generate(ctx_, tok_, sampler_, prompt, n_predict, on_text, out);
  }

 private:
  GeneratorOptions options_;
  std::unique_ptr<model::Model> model_;
  tokenizer::Tokenizer tok_;
  ThreadPool pool_;
  model::Context ctx_;
  std::unique_ptr<model::ActSparsity> sparsity_;
  sample::Sampler sampler_;
};

}  // namespace squeeze::serve
