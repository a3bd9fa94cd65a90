#include "model/blocks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/timer.h"
#include "kv/kv_attention.h"
#include "model/names.h"
#include "model/sparse_blocks.h"
#include "ops/activation.h"
#include "ops/head_scores.h"
#include "ops/norm.h"

namespace squeeze::model {

LayerPass::LayerPass(const Model& m, int64_t il_, int64_t n_, ForwardScratch& s_,
                     ThreadPool& pool_, const TensorCallback* callback_)
    : hp(m.hparams()),
      L(m.layers[il_]),
      il(il_),
      n(n_),
      s(s_),
      pool(pool_),
      callback(callback_),
      sparse(s_.sparsity != nullptr ? &s_.sparsity->layer(il_) : nullptr) {}

void LayerPass::matmul(const ops::WeightView& w, const float* x, float* y) const {
  ops::matmul(w, x, n, w.n_cols, y, w.n_rows, pool, s.mm);
  count(dense_bytes(w), dense_bytes(w));
}

namespace {

void qkv_dense(const LayerPass& p) {
  const int64_t n_q = p.hp.n_head * p.hp.head_dim;
  const int64_t n_kv = p.hp.n_head_kv * p.hp.head_dim;
  ForwardScratch& s = p.s;
  ops::matmul({{&p.L.wq, s.q.data(), n_q}, {&p.L.wk, s.k.data(), n_kv}, {&p.L.wv, s.v.data(), n_kv}},
              s.xn.data(), p.n, p.hp.n_embd, p.pool, s.mm);
  for (const ops::WeightView* w : {&p.L.wq, &p.L.wk, &p.L.wv}) p.count(dense_bytes(*w), dense_bytes(*w));
}

void attn_output_dense(const LayerPass& p) { p.matmul(p.L.wo, p.s.attn.data(), p.s.proj.data()); }

void mlp_dense(const LayerPass& p) {
  const int64_t n_ff = p.hp.n_ff;
  ForwardScratch& s = p.s;
  ops::matmul({{&p.L.ffn_gate, s.gate.data(), n_ff}, {&p.L.ffn_up, s.up.data(), n_ff}},
              s.xn.data(), p.n, p.hp.n_embd, p.pool, s.mm);
  for (const ops::WeightView* w : {&p.L.ffn_gate, &p.L.ffn_up}) p.count(dense_bytes(*w), dense_bytes(*w));
  p.emit(names::kFfnGate, s.gate.data(), n_ff);
  gated_act(p.hp, s.gate.data(), s.up.data(), p.n * n_ff, s.gate.data());
  p.emit(names::kFfnAct, s.gate.data(), n_ff);
  p.matmul(p.L.ffn_down, s.gate.data(), s.proj.data());
}

constexpr LayerBlocks kDense{qkv_dense, attn_output_dense, mlp_dense};
constexpr LayerBlocks kTeal{qkv_teal, attn_output_teal, mlp_teal};
constexpr LayerBlocks kGateCut{qkv_dense, attn_output_dense, mlp_gate_cut};

}  // namespace

const LayerBlocks& layer_blocks(const ActSparsity* policy) {
  if (policy == nullptr) return kDense;
  return policy->method() == sparsity::Method::Teal ? kTeal : kGateCut;
}

void rms_norm_rows(const LayerPass& p, const float* x, const float* w, float* out) {
  const int64_t n_embd = p.hp.n_embd;
  for (int64_t t = 0; t < p.n; ++t) {
    ops::rms_norm(x + t * n_embd, w, n_embd, p.hp.rms_eps, out + t * n_embd);
  }
}

void rms_norm_heads(const LayerPass& p, float* x, int64_t n_heads, const float* w) {
  const int64_t hd = p.hp.head_dim;
  for (int64_t r = 0; r < p.n * n_heads; ++r) {
    ops::rms_norm(x + r * hd, w, hd, p.hp.rms_eps, x + r * hd);
  }
}

void add_bias_rows(const LayerPass& p, float* x, const float* b, int64_t width) {
  for (int64_t t = 0; t < p.n; ++t) {
    for (int64_t i = 0; i < width; ++i) x[t * width + i] += b[i];
  }
}

void moe_mlp(const LayerPass& p) {
  const HParams& hp = p.hp;
  ForwardScratch& s = p.s;
  ForwardScratch::Moe& mo = s.moe;
  const int64_t n = p.n, n_embd = hp.n_embd, n_ff = hp.n_ff;
  const int64_t n_exp = hp.n_expert, k = hp.n_expert_used;
  mo.probs.resize(static_cast<size_t>(n * n_exp));
  p.matmul(p.L.ffn_gate_inp, s.xn.data(), mo.probs.data());
  mo.chosen.resize(static_cast<size_t>(n * k));
  mo.weights.resize(static_cast<size_t>(n * k));
  mo.order.resize(static_cast<size_t>(n_exp));
  for (int64_t t = 0; t < n; ++t) {
    // ggml_soft_max: exp(x - max) summed in double, scaled by the float of 1 / sum.
    float* pr = mo.probs.data() + t * n_exp;
    const float mx = *std::max_element(pr, pr + n_exp);
    double sum = 0;
    for (int64_t e = 0; e < n_exp; ++e) {
      pr[e] = std::exp(pr[e] - mx);
      sum += pr[e];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t e = 0; e < n_exp; ++e) pr[e] *= inv;
    std::iota(mo.order.begin(), mo.order.end(), 0);
    std::partial_sort(mo.order.begin(), mo.order.begin() + k, mo.order.end(),
                      [&](int32_t a, int32_t b) { return pr[a] > pr[b] || (pr[a] == pr[b] && a < b); });
    // The chosen probabilities over their sum (summed in double, the sum at least 2^-14).
    double wsum = 0;
    for (int64_t j = 0; j < k; ++j) wsum += pr[mo.order[j]];
    const float div = std::max(static_cast<float>(wsum), 6.103515625e-5f);
    for (int64_t j = 0; j < k; ++j) {
      mo.chosen[t * k + j] = mo.order[j];
      mo.weights[t * k + j] = pr[mo.order[j]] / div;
    }
  }
  mo.slots.resize(static_cast<size_t>(n * k * n_embd));
  mo.x.resize(static_cast<size_t>(n * n_embd));
  mo.y.resize(static_cast<size_t>(n * n_embd));
  for (int64_t e = 0; e < n_exp; ++e) {
    mo.rows.clear();
    for (int64_t r = 0; r < n * k; ++r) {
      if (mo.chosen[r] == e) mo.rows.push_back(static_cast<int32_t>(r));
    }
    if (mo.rows.empty()) continue;
    const int64_t m = static_cast<int64_t>(mo.rows.size());
    for (int64_t j = 0; j < m; ++j) {
      const float* src = s.xn.data() + (mo.rows[j] / k) * n_embd;
      std::copy(src, src + n_embd, mo.x.data() + j * n_embd);
    }
    const ExpertMlp& E = p.L.experts[e];
    ops::matmul({{&E.gate, s.gate.data(), n_ff}, {&E.up, s.up.data(), n_ff}}, mo.x.data(), m,
                n_embd, p.pool, s.mm);
    gated_act(hp, s.gate.data(), s.up.data(), m * n_ff, s.gate.data());
    ops::matmul(E.down, s.gate.data(), m, n_ff, mo.y.data(), n_embd, p.pool, s.mm);
    for (const ops::WeightView* w : {&E.gate, &E.up, &E.down}) p.count(dense_bytes(*w), dense_bytes(*w));
    for (int64_t j = 0; j < m; ++j) {
      const float w = mo.weights[mo.rows[j]];
      const float* y = mo.y.data() + j * n_embd;
      float* out = mo.slots.data() + static_cast<int64_t>(mo.rows[j]) * n_embd;
      for (int64_t i = 0; i < n_embd; ++i) out[i] = y[i] * w;
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    float* out = s.proj.data() + t * n_embd;
    const float* slot = mo.slots.data() + t * k * n_embd;
    std::copy(slot, slot + n_embd, out);
    for (int64_t j = 1; j < k; ++j) {
      for (int64_t i = 0; i < n_embd; ++i) out[i] += slot[j * n_embd + i];
    }
  }
}

void gated_act(const HParams& hp, const float* gate, const float* up, int64_t n, float* out) {
  switch (hp.ffn_act) {
    case HParams::FfnAct::Silu: ops::swiglu(gate, up, n, out); return;
    case HParams::FfnAct::GeluTanh: ops::geglu(gate, up, n, out); return;
  }
}

void add_rows(const LayerPass& p, float* x, const float* y) {
  for (int64_t i = 0; i < p.n * p.hp.n_embd; ++i) x[i] += y[i];
}

namespace {

// RoPE on the chunk's rows of s.k, and of s.q when with_q, at the layout's positions.
void rope_rows(const LayerPass& p, const ChunkLayout& b, bool with_q) {
  const HParams& hp = p.hp;
  ForwardScratch& s = p.s;
  const int64_t n_q = hp.n_head * hp.head_dim;
  const int64_t n_kv = hp.n_head_kv * hp.head_dim;
  const float base = hp.is_swa(p.il) ? hp.rope_freq_base_swa : hp.rope_freq_base;
  const ops::Rope rope(static_cast<int>(hp.n_rot), base, hp.rope_layout, p.L.rope_freqs);
  // The angles for this base: its slot, or the other one (two bases at most: local, global).
  ForwardScratch::RopeAngles& a =
      s.rope[0].base == base || s.rope[0].pos.empty() ? s.rope[0] : s.rope[1];
  if (a.base != base || !std::equal(b.pos.begin(), b.pos.end(), a.pos.begin(), a.pos.end())) {
    a.cs.resize(static_cast<size_t>(p.n * hp.n_rot));
    for (int64_t t = 0; t < p.n; ++t) rope.angles(b.pos[t], a.cs.data() + t * hp.n_rot);
    a.pos.assign(b.pos.begin(), b.pos.end());
    a.base = base;
  }
  for (int64_t t = 0; t < p.n; ++t) {
    const float* cs = a.cs.data() + t * hp.n_rot;
    if (with_q) {
      rope.rotate(s.q.data() + t * n_q, static_cast<int>(hp.n_head),
                  static_cast<int>(hp.head_dim), cs);
    }
    rope.rotate(s.k.data() + t * n_kv, static_cast<int>(hp.n_head_kv),
                static_cast<int>(hp.head_dim), cs);
  }
}

// Every run's K and V rows into its cells of kv's layer.
void store_kv(const LayerPass& p, kv::KvCache& kv, const ChunkLayout& b) {
  const int64_t n_kv = p.hp.n_head_kv * p.hp.head_dim;
  for (const SeqRun& r : b.runs) {
    for (size_t i = 0; i < r.rows.size(); ++i) {
      const int64_t row = r.rows[i];
      kv.store(p.il, r.cells[r.pos0 + i], p.s.k.data() + row * n_kv, p.s.v.data() + row * n_kv);
    }
  }
}

// Attention of a prompt run's len query rows q (positions pos0..) into out: every head, or
// with head pruning (s.heads), per chunk of positions the heads that score highest on probe
// queries spread over the chunk (the last row among them).
void attend_run(const LayerPass& p, const ops::AttentionShape& shape, const float* q, int64_t len,
                int64_t pos0, const ops::KvView& view, float* out) {
  ForwardScratch& s = p.s;
  const HeadPruning* hp = s.heads;
  if (hp == nullptr) {
    ops::attention(shape, q, len, pos0, view, out, p.pool, s.att);
    return;
  }
  const int64_t n_q = static_cast<int64_t>(shape.n_head) * shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int64_t k_groups = std::clamp<int64_t>(std::lround(hp->keep * shape.n_head_kv), 1, shape.n_head_kv);
  const int64_t k = hp->whole_groups
                        ? k_groups * group
                        : std::clamp<int64_t>(std::lround(hp->keep * shape.n_head), 1, shape.n_head);
  // keep = the k best heads, or the k_groups best groups.
  auto choose = [&](std::span<const float> score, uint8_t* keep) {
    if (hp->whole_groups) {
      ops::top_groups(score, group, k_groups, keep);
    } else {
      ops::top_heads(score, k, keep);
    }
  };
  // The chunks of positions and their masks first, then one attention call over all of them.
  s.head_segments.clear();
  for (int64_t t0 = 0; t0 < len;) {
    const int64_t t1 = std::min(len, ((pos0 + t0) / hp->chunk + 1) * hp->chunk - pos0);
    s.head_segments.push_back({t0, t1, nullptr});
    t0 = t1;
  }
  const auto n_seg = static_cast<int64_t>(s.head_segments.size());
  s.head_keep.resize(static_cast<size_t>(n_seg * shape.n_head));
  s.head_score.resize(static_cast<size_t>(shape.n_head));
  if (hp->fixed.empty()) {
    ops::prepare_head_scores(shape, hp->score, view, pos0 + len, p.pool, s.head_scratch);
  }
  for (int64_t i = 0; i < n_seg; ++i) {
    ops::HeadSegment& seg = s.head_segments[i];
    uint8_t* keep = s.head_keep.data() + i * shape.n_head;
    seg.keep = keep;
    if (!hp->fixed.empty()) {
      choose(std::span(hp->fixed).subspan(static_cast<size_t>(p.il * shape.n_head),
                                          static_cast<size_t>(shape.n_head)), keep);
      continue;
    }
    const int64_t n = seg.t1 - seg.t0, n_probe = std::min(hp->probes, n);
    s.probe_pos.resize(static_cast<size_t>(n_probe));
    s.probe_q.resize(static_cast<size_t>(n_probe * n_q));
    for (int64_t j = 0; j < n_probe; ++j) {
      const int64_t t = seg.t0 + (j + 1) * n / n_probe - 1;
      s.probe_pos[j] = pos0 + t;
      std::copy_n(q + t * n_q, n_q, s.probe_q.data() + j * n_q);
    }
    ops::head_scores(shape, hp->score, s.probe_q.data(), n_q, s.probe_pos, view,
                     s.head_score.data(), p.pool, s.head_scratch);
    choose(s.head_score, keep);
  }
  ops::attention(shape, q, len, pos0, view, out, p.pool, s.att, s.head_segments);
  s.counters.attn_heads_run += static_cast<uint64_t>(k * len);
  s.counters.attn_heads_seen += static_cast<uint64_t>(shape.n_head * len);
}

}  // namespace

void rope_qk(const LayerPass& p, const ChunkLayout& b) {
  rope_rows(p, b, true);
  p.emit(names::kQ, p.s.q.data(), p.hp.n_head * p.hp.head_dim);
  p.emit(names::kK, p.s.k.data(), p.hp.n_head_kv * p.hp.head_dim);
  p.emit(names::kV, p.s.v.data(), p.hp.n_head_kv * p.hp.head_dim);
}

void write_kv_only(const LayerPass& p, kv::KvCache& kv, const ChunkLayout& b) {
  const HParams& hp = p.hp;
  ForwardScratch& s = p.s;
  const int64_t n_kv = hp.n_head_kv * hp.head_dim;
  rms_norm_rows(p, s.x.data(), p.L.attn_norm, s.xn.data());
  p.emit(names::kAttnNorm, s.xn.data(), hp.n_embd);
  ops::matmul({{&p.L.wk, s.k.data(), n_kv}, {&p.L.wv, s.v.data(), n_kv}}, s.xn.data(), p.n,
              hp.n_embd, p.pool, s.mm);
  for (const ops::WeightView* w : {&p.L.wk, &p.L.wv}) p.count(dense_bytes(*w), dense_bytes(*w));
  if (p.L.bk != nullptr) add_bias_rows(p, s.k.data(), p.L.bk, n_kv);
  if (p.L.bv != nullptr) add_bias_rows(p, s.v.data(), p.L.bv, n_kv);
  if (p.L.attn_k_norm != nullptr) rms_norm_heads(p, s.k.data(), hp.n_head_kv, p.L.attn_k_norm);
  rope_rows(p, b, false);
  p.emit(names::kK, s.k.data(), n_kv);
  p.emit(names::kV, s.v.data(), n_kv);
  store_kv(p, kv, b);
}

void attend(const LayerPass& p, kv::KvCache& kv, const ChunkLayout& b) {
  const HParams& hp = p.hp;
  ForwardScratch& s = p.s;
  const int64_t n_q = hp.n_head * hp.head_dim;
  const float scale = hp.attn_scale > 0 ? hp.attn_scale : 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  if (hp.scale_q_first) {
    for (const SeqRun& r : b.runs) {
      for (const int64_t row : r.rows) {
        float* q = s.q.data() + row * n_q;
        for (int64_t i = 0; i < n_q; ++i) q[i] *= scale;
      }
    }
  }
  const ops::AttentionShape shape{static_cast<int>(hp.n_head), static_cast<int>(hp.n_head_kv),
                                  static_cast<int>(hp.head_dim), hp.scale_q_first ? 1.0f : scale,
                                  hp.is_swa(p.il) ? hp.n_swa : 0};
  // Every run's new K and V first; then the runs of one token (decodes) in one pass over all
  // their (sequence, head) pairs, and each longer run (a prompt chunk) on its own.
  store_kv(p, kv, b);
  const Timer timer;
  s.decode_queries.clear();
  if (s.kv_rows.size() < b.runs.size()) s.kv_rows.resize(b.runs.size());
  // A quantized cache's decodes read its codes in place (kv/kv_attention.h); its prompt runs
  // read its rows dequantized to half.
  const bool codes = kv.options().quantized();
  for (size_t i = 0; i < b.runs.size(); ++i) {
    const SeqRun& r = b.runs[i];
    if (r.rows.size() == 1) {
      const int64_t row = r.rows.front();
      const ops::KvView view = codes ? ops::KvView{nullptr, nullptr, kv.row(), r.cells}
                                     : kv.view(p.il, r.cells);
      s.decode_queries.push_back({s.q.data() + row * n_q, r.pos0, view, s.attn.data() + row * n_q});
    }
  }
  // An eviction policy's attention statistics of run i's len query rows q (kv/evict.h).
  auto collect = [&](size_t i, const float* q, int64_t len) {
    if (i >= s.attn_probs.size()) return;
    const SeqRun& r = b.runs[i];
    ops::ProbSums sums = s.attn_probs[i];
    sums.acc += p.il * hp.n_head_kv * sums.stride;
    ops::attention_probs(shape, q, len, r.pos0, kv.view(p.il, r.cells), sums, p.pool, s.probs_scratch);
  };
  for (size_t i = 0; i < b.runs.size(); ++i) {
    if (b.runs[i].rows.size() == 1) collect(i, s.q.data() + b.runs[i].rows.front() * n_q, 1);
  }
  if (!s.decode_queries.empty()) {
    if (codes) {
      kv::attention_decode(shape, kv, p.il, s.decode_queries, p.pool, s.kv_attention);
    } else {
      ops::attention_decode(shape, s.decode_queries, p.pool, s.att);
    }
  }
  for (size_t i = 0; i < b.runs.size(); ++i) {
    const SeqRun& r = b.runs[i];
    const int64_t len = static_cast<int64_t>(r.rows.size());
    if (len == 1) continue;
    const ops::KvView view = kv.read(p.il, r.cells, s.kv_rows[i], p.pool);
    if (r.contiguous()) {
      const int64_t r0 = r.rows.front();
      attend_run(p, shape, s.q.data() + r0 * n_q, len, r.pos0, view, s.attn.data() + r0 * n_q);
      collect(i, s.q.data() + r0 * n_q, len);
      continue;
    }
    s.q_seq.resize(static_cast<size_t>(len * n_q));
    s.attn_seq.resize(static_cast<size_t>(len * n_q));
    for (int64_t i = 0; i < len; ++i) {
      std::copy_n(s.q.data() + r.rows[i] * n_q, n_q, s.q_seq.data() + i * n_q);
    }
    attend_run(p, shape, s.q_seq.data(), len, r.pos0, view, s.attn_seq.data());
    collect(i, s.q_seq.data(), len);
    for (int64_t i = 0; i < len; ++i) {
      std::copy_n(s.attn_seq.data() + i * n_q, n_q, s.attn.data() + r.rows[i] * n_q);
    }
  }
  s.counters.attn_seconds += timer.seconds();
  p.emit(names::kKqvOut, s.attn.data(), n_q);
}

void output_head(const Model& m, ForwardScratch& s, ThreadPool& pool, const float* x,
                 std::span<const int32_t> logit_rows, float* logits,
                 const TensorCallback* callback) {
  const HParams& hp = m.hparams();
  const int64_t n_embd = hp.n_embd;
  const int64_t rows = static_cast<int64_t>(logit_rows.size());
  auto emit = [&](std::string_view name, const float* data, int64_t width) {
    if (callback != nullptr && *callback) (*callback)(name, -1, data, rows, width);
  };
  for (int64_t i = 0; i < rows; ++i) {
    ops::rms_norm(x + logit_rows[i] * n_embd, m.output_norm, n_embd, hp.rms_eps,
                  s.xn.data() + i * n_embd);
  }
  // Head sparsity (an extension of TEAL, asked for with --head-sparsity): the same threshold
  // rule on the head's input; one token reads only the kept inputs' columns.
  const SparseHead* head =
      s.sparsity != nullptr && s.sparsity->head().on ? &s.sparsity->head() : nullptr;
  int64_t head_kept = 0;
  if (head != nullptr) {
    int64_t total = 0;
    for (int64_t t = 0; t < rows; ++t) {
      head_kept = apply_threshold(s.xn.data() + t * n_embd, n_embd, head->t, s.idx.data());
      total += head_kept;
    }
    s.counters.head_kept += static_cast<uint64_t>(total);
    s.counters.head_seen += static_cast<uint64_t>(rows * n_embd);
  }
  emit(names::kResultNorm, s.xn.data(), n_embd);
  if (head != nullptr && rows == 1 && head->cols.n_rows > 0 &&
      static_cast<double>(head_kept) <= kSparseMaxDensity * static_cast<double>(n_embd)) {
    ops::prepare_sparse_input(s.xn.data(), s.idx.data(), head_kept, n_embd, s.sparse.input,
                              ops::needs_q4_input(head->cols));
    ops::sparse_gemv(head->cols, s.sparse.input, logits, pool, s.sparse);
  } else {
    ops::matmul(m.output, s.xn.data(), rows, n_embd, logits, hp.n_vocab, pool, s.mm);
  }
  emit(names::kResultOutput, logits, hp.n_vocab);
}

}  // namespace squeeze::model
