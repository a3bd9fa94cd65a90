#include "model/context.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "model/forward.h"

namespace squeeze::model {

static int64_t checked_ctx(const HParams& hp, int64_t n_ctx) {
  if (n_ctx <= 0) throw UsageError("context size must be positive");
  if (n_ctx > hp.n_ctx_train) {
    throw UsageError("context size " + std::to_string(n_ctx) + " exceeds the model's " +
                     std::to_string(hp.n_ctx_train) + " tokens");
  }
  return n_ctx;
}

// The cells of a context's cache: kv_tokens, or n_ctx rounded up to whole blocks for each
// sequence (after checking the options, which set the block).
static int64_t kv_capacity(const HParams& hp, int64_t n_ctx, int64_t n_seq, int64_t kv_tokens,
                           const kv::KvOptions& o) {
  kv::check_kv_options(o, hp.n_head_kv * hp.head_dim);
  const int64_t block = kv::block_tokens(o);
  return kv_tokens > 0 ? kv_tokens : n_seq * ((n_ctx + block - 1) / block * block);
}

Context::Context(const Model& model, int64_t n_ctx, ThreadPool& pool, int64_t n_batch,
                 int64_t n_seq, int64_t kv_tokens, const kv::KvOptions& kv_options)
    : model_(model),
      pool_(pool),
      n_ctx_(checked_ctx(model.hparams(), n_ctx)),
      kv_(make_kv_cache(model.hparams(), kv_capacity(model.hparams(), n_ctx_, n_seq, kv_tokens, kv_options),
                        n_seq, kv_options)),
      s_(model.hparams(), std::max<int64_t>(1, std::min(n_batch, n_ctx))),
      cells_(static_cast<size_t>(n_seq)) {
  if (kv_options.k_prerope) kv_.set_key_rope(key_ropes(model), model.hparams().head_dim);
  if (kv_options.codebook) kv_.set_codebook(kv::KvCodebook::require(model.file(), kv_options.type));
}

Error Context::kv_full(const std::string& who, int64_t blocks) const {
  return Error("KV cache full: " + who + " needs " + std::to_string(blocks) + " blocks of " +
               std::to_string(kv_.block_tokens()) + " tokens, " +
               std::to_string(kv_.blocks().n_available()) + " are free (raise the KV capacity)");
}

std::span<const float> Context::decode(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  return decode_from(tokens, all_logits ? 0 : std::max<int64_t>(0, n - 1));
}

std::span<const float> Context::decode_from(std::span<const int32_t> tokens, int64_t first) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw UsageError("decode called with no tokens");
  if (first < 0 || first > n) {
    throw UsageError("decode_from: first row " + std::to_string(first) + " is outside 0.." +
                     std::to_string(n));
  }
  Batch b;
  const auto p0 = static_cast<int32_t>(n_past(0));
  for (int64_t t = 0; t < n; ++t) b.add(tokens[t], p0 + static_cast<int32_t>(t), 0, t >= first);
  return decode_batch(b);
}

std::span<const float> Context::decode_batch(const Batch& b) {
  const int64_t n = b.size();
  const int64_t n_vocab = model_.hparams().n_vocab;
  if (n == 0) throw UsageError("decode called with no tokens");
  if (static_cast<int64_t>(b.pos.size()) != n || static_cast<int64_t>(b.seq.size()) != n ||
      static_cast<int64_t>(b.logits.size()) != n) {
    throw UsageError("a batch's token, pos, seq and logits lists differ in length");
  }
  // Check everything before anything runs: sequences, positions that continue each sequence,
  // the context, the vocabulary.
  std::vector<int64_t> next(static_cast<size_t>(n_seq()));
  for (int64_t sq = 0; sq < n_seq(); ++sq) next[static_cast<size_t>(sq)] = n_past(sq);
  int64_t n_logits = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int32_t sq = b.seq[t];
    if (sq < 0 || sq >= n_seq()) {
      throw UsageError("token " + std::to_string(t) + " of the batch is for sequence " +
                       std::to_string(sq) + "; this context holds " + std::to_string(n_seq()));
    }
    int64_t& p = next[static_cast<size_t>(sq)];
    if (b.pos[t] != p) {
      throw UsageError("token " + std::to_string(t) + " of the batch is at position " +
                       std::to_string(b.pos[t]) + "; sequence " + std::to_string(sq) +
                       " continues at " + std::to_string(p));
    }
    if (++p > n_ctx()) {
      throw Error("context overflow: sequence " + std::to_string(sq) + " would hold " +
                  std::to_string(p) + " tokens > context size " + std::to_string(n_ctx()) +
                  " (raise --ctx)");
    }
    if (b.token[t] < 0 || b.token[t] >= n_vocab) {
      throw UsageError("token id " + std::to_string(b.token[t]) + " is outside the vocabulary");
    }
    n_logits += b.logits[t] != 0;
  }
  // With eviction the blocks are taken chunk by chunk (begin_evict_chunk).
  if (!evict_.on()) {
    int64_t blocks = 0;
    for (int64_t sq = 0; sq < n_seq(); ++sq) blocks += kv_.blocks_needed(sq, next[sq] - n_past(sq));
    if (blocks > kv_.blocks().n_available()) throw kv_full("the batch", blocks);
    for (int64_t sq = 0; sq < n_seq(); ++sq) kv_.prepare(sq, next[sq] - n_past(sq));
  }
  logits_.resize(static_cast<size_t>(n_logits * n_vocab));
  // With prefill pruning (a skip set, head pruning), a sequence's tokens before its first token
  // with logits wanted are its prompt's: they run first, pruned (skipped layers write only their
  // K and V; dropped heads add nothing); the rest run the whole network. Each sequence keeps
  // its order.
  std::vector<int32_t>& pruned = phase_rows_[0];
  std::vector<int32_t>& full = phase_rows_[1];
  pruned.clear();
  full.clear();
  const bool prune = !prefill_skip_.empty() || heads_.has_value();
  std::vector<uint8_t> seen_logits(static_cast<size_t>(n_seq()), prune ? 0 : 1);
  for (int64_t t = 0; t < n; ++t) {
    uint8_t& seen = seen_logits[static_cast<size_t>(b.seq[t])];
    seen |= b.logits[t];
    (seen ? full : pruned).push_back(static_cast<int32_t>(t));
  }
  float* out = logits_.data();
  run_rows(b, pruned, true, out);
  run_rows(b, full, false, out);
  return logits_;
}

void Context::run_rows(const Batch& b, std::span<const int32_t> idx, bool pruned, float*& out) {
  const int64_t n_vocab = model_.hparams().n_vocab;
  const int64_t n = static_cast<int64_t>(idx.size());
  std::vector<int32_t> rows;
  for (int64_t i0 = 0; i0 < n; i0 += s_.n_batch) {
    const int64_t len = std::min(s_.n_batch, n - i0);
    chunk_pos_.resize(static_cast<size_t>(len));
    chunk_tokens_.resize(static_cast<size_t>(len));
    ChunkLayout layout;
    layout.n = len;
    rows.clear();
    for (int64_t r = 0; r < len; ++r) {
      const int32_t t = idx[static_cast<size_t>(i0 + r)];
      chunk_pos_[r] = b.pos[t];
      chunk_tokens_[r] = b.token[t];
      const int32_t sq = b.seq[t];
      auto run = std::find_if(layout.runs.begin(), layout.runs.end(),
                              [&](const SeqRun& x) { return x.seq == sq; });
      if (run == layout.runs.end()) {
        // The run's first cache index: its position less the tokens evicted before it.
        layout.runs.push_back({sq, static_cast<int32_t>(kv_.seq_len(sq)), {}, {}});
        run = layout.runs.end() - 1;
      }
      run->rows.push_back(static_cast<int32_t>(r));
      if (b.logits[t]) rows.push_back(static_cast<int32_t>(r));
    }
    layout.pos = chunk_pos_;
    if (evict_.on()) begin_evict_chunk(layout);
    for (SeqRun& run : layout.runs) {
      std::vector<int32_t>& cells = cells_[static_cast<size_t>(run.seq)];
      kv_.cells(run.seq, run.pos0 + static_cast<int64_t>(run.rows.size()), cells);
      run.cells = cells;
    }
    ForwardArgs args;
    args.tokens = chunk_tokens_;
    args.layout = &layout;
    args.logits = rows.empty() ? nullptr : out;
    args.logit_rows = rows;
    args.callback = &callback_;
    if (pruned) {
      args.skip_layers = prefill_skip_;
      args.heads = heads_ ? &*heads_ : nullptr;
    }
    forward(model_, kv_, s_, pool_, args);
    for (const SeqRun& r : layout.runs) {
      run_tokens_.clear();
      for (const int32_t row : r.rows) run_tokens_.push_back(chunk_tokens_[row]);
      kv_.commit(r.seq, run_tokens_);
      if (evict_.on()) evict(r.seq);
    }
    out += static_cast<int64_t>(rows.size()) * n_vocab;
  }
}

void Context::truncate(int64_t n, int64_t seq) {
  kv_.truncate(seq, n);
  if (!evict_scores_.empty()) {  // the statistics of the dropped tokens
    kv::EvictScores& sc = evict_scores_[static_cast<size_t>(seq)];
    for (int64_t sl = 0; sl < sc.n_slots; ++sl) {
      std::fill(sc.slot(sl) + kv_.seq_len(seq), sc.slot(sl) + sc.stride, 0.0f);
    }
  }
}

void Context::fork(int64_t src, int64_t dst) {
  kv_.fork(src, dst);
  if (!evict_scores_.empty() && src != dst) {
    evict_scores_[static_cast<size_t>(dst)].acc = evict_scores_[static_cast<size_t>(src)].acc;
  }
}

void Context::set_eviction(const kv::EvictOptions& o) {
  kv::check_evict_options(o);
  if (o.on() && kv_.options().quantized()) {
    throw UsageError("token eviction (--kv-evict) needs an f16 KV cache (--kv-type f16)");
  }
  evict_ = kv::resolved(o);
  evict_scores_.clear();
  s_.attn_probs.clear();
  if (!kv::needs_attention(evict_)) return;
  const HParams& hp = model_.hparams();
  evict_scores_.resize(static_cast<size_t>(n_seq()));
  for (kv::EvictScores& sc : evict_scores_) sc.reset(hp.n_layer * hp.n_head_kv, kv_.capacity());
}

void Context::begin_evict_chunk(const ChunkLayout& layout) {
  for (const SeqRun& r : layout.runs) {
    const auto n = static_cast<int64_t>(r.rows.size());
    const int64_t need = kv_.blocks_needed(r.seq, n);
    if (!kv_.prepare(r.seq, n)) throw kv_full("sequence " + std::to_string(r.seq), need);
  }
  s_.attn_probs.clear();
  if (evict_scores_.empty()) return;
  if (evict_weights_.size() < layout.runs.size()) evict_weights_.resize(layout.runs.size());
  for (size_t i = 0; i < layout.runs.size(); ++i) {
    const SeqRun& r = layout.runs[i];
    kv::EvictScores& sc = evict_scores_[static_cast<size_t>(r.seq)];
    kv::begin_chunk(evict_, sc, r.pos0, static_cast<int64_t>(r.rows.size()), evict_weights_[i]);
    ops::ProbSums sums{sc.acc.data(), sc.stride, evict_weights_[i].data()};
    if (evict_.policy == kv::EvictPolicy::Keyformer) {
      sums.tau = static_cast<float>(evict_.tau);
      if (evict_.tau_end > 0) sums.tau_step = static_cast<float>((evict_.tau_end - evict_.tau) / static_cast<double>(n_ctx_));
    }
    s_.attn_probs.push_back(sums);
  }
}

void Context::evict(int32_t seq) {
  const int64_t len = kv_.seq_len(seq);
  if (len <= evict_.budget) return;
  std::vector<float>& scores = evict_token_scores_;
  scores.clear();
  if (kv::needs_attention(evict_)) {
    const kv::EvictScores& sc = evict_scores_[static_cast<size_t>(seq)];
    if (kv::needs_value_norms(evict_)) {  // |v|_1 of each token's value per (layer, kv head)
      const HParams& hp = model_.hparams();
      std::vector<int32_t>& cells = cells_[static_cast<size_t>(seq)];
      kv_.cells(seq, len, cells);
      evict_vnorms_.resize(static_cast<size_t>(sc.n_slots * len));
      for (int64_t il = 0; il < hp.n_layer; ++il) {
        const ops::KvView view = kv_.view(il, cells);
        for (int64_t hk = 0; hk < hp.n_head_kv; ++hk) {
          float* out = evict_vnorms_.data() + (il * hp.n_head_kv + hk) * len;
          for (int64_t j = 0; j < len; ++j) {
            const f16_t* v = view.v + cells[j] * view.row_stride + hk * hp.head_dim;
            float s = 0;
            for (int64_t d = 0; d < hp.head_dim; ++d) s += std::fabs(f16_to_f32(v[d]));
            out[j] = s;
          }
        }
      }
    }
    kv::token_scores(evict_, sc, len, evict_vnorms_, scores);
  }
  const std::vector<int32_t> kept = kv::select_kept(evict_, len, scores);
  kv_.evict(seq, kept);
  if (!evict_scores_.empty()) kv::compact(evict_scores_[static_cast<size_t>(seq)], kept);
  n_evicted_ += len - static_cast<int64_t>(kept.size());
}

void Context::set_prefill_heads(std::optional<HeadPruning> h) {
  if (h && !(h->keep > 0 && h->keep <= 1)) {
    throw UsageError("the fraction of heads kept must be in (0, 1]");
  }
  if (h && (h->chunk < 1 || h->probes < 1)) {
    throw UsageError("head pruning needs a chunk and probes of at least 1");
  }
  const HParams& hp = model_.hparams();
  if (h && !h->fixed.empty() && static_cast<int64_t>(h->fixed.size()) != hp.n_layer * hp.n_head) {
    throw UsageError("a stored head ranking needs one score per layer and head");
  }
  if (h && h->keep >= 1) h.reset();  // every head: the dense path, bit for bit
  heads_ = h;
}

void Context::set_prefill_skip(std::vector<uint8_t> layers) {
  const int64_t n_layer = model_.hparams().n_layer;
  if (!layers.empty() && static_cast<int64_t>(layers.size()) != n_layer) {
    throw UsageError("a prefill skip set has " + std::to_string(layers.size()) +
                     " entries for " + std::to_string(n_layer) + " layers");
  }
  if (std::none_of(layers.begin(), layers.end(), [](uint8_t v) { return v != 0; })) layers.clear();
  prefill_skip_ = std::move(layers);
}

}  // namespace squeeze::model
