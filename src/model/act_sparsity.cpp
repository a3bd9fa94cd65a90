#include "model/act_sparsity.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>

#include "core/error.h"
#include "ops/threshold.h"

namespace squeeze::model {

namespace {

// The column layout of w, or an empty one (dense fallback) where the format has none.
ops::ColumnWeights columns_or_empty(const ops::WeightView& w, int64_t& n_fallback) {
  if (ops::column_layout_supported(w.type) && w.n_rows % 32 == 0) return ops::to_column_layout(w);
  ++n_fallback;
  return {};
}

// The column layout of the matrices' rows stacked in order (one input, so equal n_cols), or an
// empty one where their formats differ or have no layout.
ops::ColumnWeights stacked_columns(std::initializer_list<const ops::WeightView*> ws) {
  const ops::WeightView& w0 = **ws.begin();
  int64_t rows = 0;
  for (const ops::WeightView* w : ws) {
    if (w->type != w0.type || w->n_cols != w0.n_cols || w->n_rows % 32 != 0) return {};
    rows += w->n_rows;
  }
  if (!ops::column_layout_supported(w0.type)) return {};
  std::vector<uint8_t> bytes(static_cast<size_t>(rows) * w0.row_bytes);
  size_t at = 0;
  for (const ops::WeightView* w : ws) {
    const size_t n = static_cast<size_t>(w->n_rows) * w->row_bytes;
    std::memcpy(bytes.data() + at, w->data, n);
    at += n;
  }
  ops::WeightView all = w0;
  all.n_rows = rows;
  all.data = bytes.data();
  return ops::to_column_layout(all);
}

}  // namespace

namespace {

sparsity::ThresholdTable table_of(const Model& m) {
  auto table = sparsity::ThresholdTable::read(m.file());
  if (!table) {
    throw UsageError(m.file().path() +
                     " has no activation-sparsity thresholds (make them with squeeze sparsify)");
  }
  return std::move(*table);
}

}  // namespace

// The gate values where |silu_for_threshold(g)| >= t, found by bisection on the float line
// (SiLU rises for g > kDip, falls below it): the first kept value above 0, and the kept
// interval of the negative dip.
void set_gate_interval(SparseLayer& S, float t) {
  auto kept = [&](float g) { return !(std::fabs(silu_for_threshold(g)) < t); };
  auto bisect = [&](float lo, float hi, bool kept_at_hi) {  // first float where kept == kept_at_hi
    for (int i = 0; i < 200 && std::nextafter(lo, hi) < hi; ++i) {
      const float mid = lo + (hi - lo) / 2;
      if (kept(mid) == kept_at_hi) hi = mid; else lo = mid;
    }
    return hi;
  };
  if (t <= 0) {  // everything kept
    S.keep_above = -std::numeric_limits<float>::infinity();
    return;
  }
  S.keep_above = bisect(0.0f, 1e6f, true);
  constexpr float kDip = -1.2784645f;  // argmin of SiLU
  if (kept(kDip)) {
    S.keep_neg_lo = bisect(-1e3f, kDip, true);
    // last kept value above the dip: bisect for the first dropped one, step back
    S.keep_neg_hi = std::nextafter(bisect(kDip, 0.0f, false), -1.0f);
  }
}

ActSparsity::ActSparsity(const Model& m, double target, ThreadPool& pool,
                         std::optional<double> head_target)
    : ActSparsity(m, table_of(m), target, pool, head_target) {}

ActSparsity::ActSparsity(const Model& m, sparsity::ThresholdTable table, double target,
                         ThreadPool& pool, std::optional<double> head_target,
                         bool column_layouts)
    : table_(std::move(table)) {
  const HParams& hp = m.hparams();
  if (hp.n_expert > 0) {
    throw UsageError(m.file().path() + ": activation sparsity does not cover a MoE model's "
                     "experts yet");
  }
  if (table_.method != sparsity::Method::Teal && hp.ffn_act != HParams::FfnAct::Silu) {
    throw UsageError(m.file().path() + ": its sparsity table cuts the MLP by SiLU(gate), and "
                     "this model's MLP is not SwiGLU");
  }
  if (table_.n_layer != hp.n_layer) {
    throw FormatError(m.file().path() + ": the sparsity table has " +
                      std::to_string(table_.n_layer) + " layers, the model " +
                      std::to_string(hp.n_layer));
  }
  const size_t li = table_.level_index(target);
  level_ = table_.levels[li];
  layers_.resize(hp.n_layer);
  // Each layer's re-layout is independent: one per thread.
  std::vector<int64_t> fallbacks(hp.n_layer, 0);
  pool.parallel_for(hp.n_layer, 1, [&](int64_t l0, int64_t l1, int) {
    for (int64_t il = l0; il < l1; ++il) {
      SparseLayer& S = layers_[il];
      const LayerWeights& L = m.layers[il];
      for (int s = 0; s < table_.sites(); ++s) S.thresholds[s] = table_.at(il, s, li);
      if (table_.method == sparsity::Method::Relu) {
        S.keep_above = std::numeric_limits<float>::denorm_min();
      } else if (table_.method == sparsity::Method::Cats) {
        set_gate_interval(S, S.thresholds[sparsity::kGateAct]);
      }
      if (!column_layouts) continue;
      int64_t& fb = fallbacks[il];
      if (table_.method == sparsity::Method::Teal) {
        S.qkv = stacked_columns({&L.wq, &L.wk, &L.wv});
        if (S.qkv.n_rows == 0) {
          S.wq = columns_or_empty(L.wq, fb);
          S.wk = columns_or_empty(L.wk, fb);
          S.wv = columns_or_empty(L.wv, fb);
        }
        S.wo = columns_or_empty(L.wo, fb);
        S.gate_up = stacked_columns({&L.ffn_gate, &L.ffn_up});
        if (S.gate_up.n_rows == 0) {
          S.gate = columns_or_empty(L.ffn_gate, fb);
          S.up = columns_or_empty(L.ffn_up, fb);
        }
      }
      S.down = columns_or_empty(L.ffn_down, fb);
    }
  });
  for (int64_t f : fallbacks) n_dense_fallback_ += f;
  if (head_target) {
    if (table_.head.empty()) {
      throw UsageError(m.file().path() +
                       " has no head thresholds (TEAL tables made by squeeze sparsify have them)");
    }
    const size_t hi = table_.level_index(*head_target);
    head_.on = true;
    head_.level = table_.levels[hi];
    head_.t = table_.head[hi];
    if (column_layouts) head_.cols = columns_or_empty(m.output, n_dense_fallback_);
  }
}

void ActSparsity::set_thresholds(int64_t il, const std::array<float, sparsity::kTealSites>& t) {
  SparseLayer& S = layers_.at(static_cast<size_t>(il));
  S.thresholds = t;
  if (table_.method == sparsity::Method::Cats) set_gate_interval(S, S.thresholds[sparsity::kGateAct]);
}

size_t ActSparsity::bytes() const {
  size_t b = 0;
  for (const SparseLayer& S : layers_) {
    for (const ops::ColumnWeights* w :
         {&S.wq, &S.wk, &S.wv, &S.wo, &S.gate, &S.up, &S.down, &S.qkv, &S.gate_up}) {
      b += w->bytes();
    }
  }
  return b + head_.cols.bytes();
}

double SparsityCounters::density(int site) const {
  return seen[site] == 0 ? 0.0 : static_cast<double>(kept[site]) / static_cast<double>(seen[site]);
}

double SparsityCounters::head_density() const {
  return head_seen == 0 ? 0.0 : static_cast<double>(head_kept) / static_cast<double>(head_seen);
}

double SparsityCounters::block_read_fraction() const {
  return block_bytes_dense == 0
             ? 0.0
             : static_cast<double>(block_bytes_read) / static_cast<double>(block_bytes_dense);
}

double weighted_density(const Model& m, sparsity::Method method,
                        const std::array<double, sparsity::kTealSites>& density) {
  if (method != sparsity::Method::Teal) return density[sparsity::kGateAct];
  const HParams& hp = m.hparams();
  const double n_q = static_cast<double>(hp.n_head * hp.head_dim);
  const double n_kv = static_cast<double>(hp.n_head_kv * hp.head_dim);
  const double e = static_cast<double>(hp.n_embd), ff = static_cast<double>(hp.n_ff);
  const double w[sparsity::kTealSites] = {e * (n_q + 2 * n_kv), n_q * e, 2 * e * ff, ff * e};
  double num = 0, den = 0;
  for (int s = 0; s < sparsity::kTealSites; ++s) {
    num += w[s] * density[s];
    den += w[s];
  }
  return num / den;
}

double SparsityCounters::weighted_density(const Model& m, sparsity::Method method) const {
  std::array<double, sparsity::kTealSites> d{};
  for (int s = 0; s < sparsity::kTealSites; ++s) d[s] = density(s);
  return model::weighted_density(m, method, d);
}

int64_t apply_threshold(float* x, int64_t n, float t, int32_t* idx) {
  return ops::threshold_indices(x, n, t, idx);
}

}  // namespace squeeze::model
