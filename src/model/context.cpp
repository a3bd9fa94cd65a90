#include "model/context.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/llama.h"

namespace squeeze::model {

kv::KvCache make_kv_cache(const HParams& hp, int64_t n_ctx) {
  return kv::KvCache(hp.n_layer, hp.n_head_kv * hp.head_dim, n_ctx);
}

ForwardScratch::ForwardScratch(const HParams& hp, int64_t n_batch_)
    : n_batch(n_batch_),
      x(n_batch_ * hp.n_embd),
      xn(n_batch_ * hp.n_embd),
      q(n_batch_ * hp.n_head * hp.head_dim),
      k(n_batch_ * hp.n_head_kv * hp.head_dim),
      v(n_batch_ * hp.n_head_kv * hp.head_dim),
      attn(n_batch_ * hp.n_head * hp.head_dim),
      gate(n_batch_ * hp.n_ff),
      up(n_batch_ * hp.n_ff),
      proj(n_batch_ * hp.n_embd),
      idx(std::max({hp.n_embd, hp.n_ff, hp.n_head * hp.head_dim})) {}

static int64_t checked_ctx(const HParams& hp, int64_t n_ctx) {
  if (n_ctx <= 0) throw UsageError("context size must be positive");
  if (n_ctx > hp.n_ctx_train) {
    throw UsageError("context size " + std::to_string(n_ctx) + " exceeds the model's " +
                     std::to_string(hp.n_ctx_train) + " tokens");
  }
  return n_ctx;
}

Context::Context(const Model& model, int64_t n_ctx, ThreadPool& pool, int64_t n_batch)
    : model_(model),
      pool_(pool),
      kv_(make_kv_cache(model.hparams(), checked_ctx(model.hparams(), n_ctx))),
      s_(model.hparams(), std::max<int64_t>(1, std::min(n_batch, n_ctx))) {}

void Context::truncate(int64_t n) {
  n_past_ = std::clamp<int64_t>(n, 0, n_past_);
  kv_.free_from(n_past_);
}

std::span<const float> Context::decode(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  return decode_from(tokens, all_logits ? 0 : std::max<int64_t>(0, n - 1));
}

std::span<const float> Context::decode_from(std::span<const int32_t> tokens, int64_t first) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = model_.hparams().n_vocab;
  if (n == 0) throw UsageError("decode called with no tokens");
  if (first < 0 || first > n) {
    throw UsageError("decode_from: first row " + std::to_string(first) + " is outside 0.." +
                     std::to_string(n));
  }
  if (n_past_ + n > kv_.n_cells()) {
    throw Error("context overflow: " + std::to_string(n_past_) + " tokens in the cache + " +
                std::to_string(n) + " new > context size " + std::to_string(kv_.n_cells()) +
                " (raise --ctx)");
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab) {
      throw UsageError("token id " + std::to_string(t) + " is outside the vocabulary");
    }
  }
  logits_.resize(static_cast<size_t>((n - first) * n_vocab));
  for (int64_t i0 = 0; i0 < n; i0 += s_.n_batch) {
    const int64_t len = std::min(s_.n_batch, n - i0);
    ForwardArgs args;
    args.tokens = tokens.subspan(i0, len);
    args.pos0 = n_past_;
    // Rows [max(first, i0), i0 + len) of this chunk need logits; none if the chunk ends first.
    const int64_t row0 = std::max(first, i0);
    if (row0 < i0 + len) {
      args.logits = logits_.data() + (row0 - first) * n_vocab;
      args.logits_first = row0 - i0;
    }
    args.callback = &callback_;
    forward_llama(model_, kv_, s_, pool_, args);
    kv_.occupy(n_past_, len, static_cast<int32_t>(n_past_), 0);
    n_past_ += len;
  }
  return logits_;
}

}  // namespace squeeze::model
