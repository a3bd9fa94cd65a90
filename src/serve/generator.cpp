#include "serve/generator.h"

#include <cstdio>

#include "core/error.h"
#include "core/timer.h"

namespace squeeze::serve {

std::string GenerationStats::summary() const {
  char buf[256];
  const double pp = prompt_seconds > 0 ? static_cast<double>(n_prompt) / prompt_seconds : 0.0;
  const double tg = gen_seconds > 0 ? static_cast<double>(n_generated) / gen_seconds : 0.0;
  std::snprintf(buf, sizeof buf,
                "prompt: %lld tokens, %.1f t/s | generation: %lld tokens, %.1f t/s | stop: %s",
                static_cast<long long>(n_prompt), pp, static_cast<long long>(n_generated), tg,
                stop_reason.c_str());
  return buf;
}

namespace {

constexpr int64_t kBatch = 256;  // tokens per forward chunk of a prompt

std::unique_ptr<model::ActSparsity> make_act_sparsity(const model::Model& m,
                                                      const GeneratorOptions& o, ThreadPool& pool) {
  if (o.head_sparsity && !o.act_sparsity) throw UsageError("--head-sparsity needs --act-sparsity");
  if (!o.act_sparsity) return nullptr;
  return std::make_unique<model::ActSparsity>(m, *o.act_sparsity, pool, o.head_sparsity);
}

}  // namespace

Generator::Generator(const GeneratorOptions& o) : Generator(o, model::Model::load(o.model_path)) {}

Generator::Generator(const GeneratorOptions& o, std::unique_ptr<model::Model> model)
    : options_(o),
      model_(std::move(model)),
      tok_(tokenizer::read_vocab(model_->file())),
      pool_(o.threads),
      ctx_(*model_, o.n_ctx, pool_, kBatch, 1, kv::evict_capacity(o.evict, o.n_ctx, kBatch, 1), o.kv),
      sparsity_(make_act_sparsity(*model_, o, pool_)),
      sampler_(o.sampling, static_cast<int32_t>(model_->hparams().n_vocab)) {
  ctx_.set_act_sparsity(sparsity_.get());
  ctx_.set_eviction(o.evict);
}

GenerationStats generate(model::Context& ctx, const tokenizer::Tokenizer& tok,
                         sample::Sampler& sampler, std::span<const int32_t> prompt,
                         int64_t n_predict, const std::function<void(std::string_view)>& on_text,
                         std::vector<int32_t>* out) {
  if (prompt.empty()) throw UsageError("the prompt is empty (no tokens to start from)");
  GenerationStats st;
  st.n_prompt = static_cast<int64_t>(prompt.size());
  for (int32_t t : prompt) sampler.accept(t);

  Timer prompt_timer;
  std::span<const float> logits = ctx.decode(prompt);
  st.prompt_seconds = prompt_timer.seconds();

  tokenizer::StreamDecoder stream(tok);
  Timer gen_timer;
  for (;;) {
    if (n_predict >= 0 && st.n_generated >= n_predict) {
      st.stop_reason = "length";
      break;
    }
    const int32_t next = sampler.sample(logits);
    if (tok.is_eog(next)) {
      st.stop_reason = "eog";
      break;
    }
    sampler.accept(next);
    ++st.n_generated;
    if (out != nullptr) out->push_back(next);
    if (const std::string piece = stream.push(next); !piece.empty()) on_text(piece);
    if (n_predict >= 0 && st.n_generated >= n_predict) {
      st.stop_reason = "length";
      break;
    }
    if (ctx.n_past() >= ctx.n_ctx()) {
      st.stop_reason = "context";
      break;
    }
    const int32_t one[1] = {next};
    logits = ctx.decode(one);
  }
  st.gen_seconds = gen_timer.seconds();
  if (const std::string rest = stream.flush(); !rest.empty()) on_text(rest);
  return st;
}

}  // namespace squeeze::serve
