#include "model/sparse_blocks.h"

#include <algorithm>
#include <initializer_list>

#include "model/names.h"
#include "ops/activation.h"

namespace squeeze::model {

namespace {

// Zeroes the small entries of rows [0, n) of data at `site` by the layer's threshold; returns
// the kept count of the last row, whose indices are in s.idx (what one token's sparse products
// need).
int64_t sparsify(const LayerPass& p, float* data, int64_t width, int site) {
  int64_t kept = 0, total = 0;
  for (int64_t t = 0; t < p.n; ++t) {
    kept = apply_threshold(data + t * width, width, p.sparse->thresholds[site], p.s.idx.data());
    total += kept;
  }
  p.s.counters.kept[site] += static_cast<uint64_t>(total);
  p.s.counters.seen[site] += static_cast<uint64_t>(p.n * width);
  return kept;
}

// A product of a sparse input: its column layout (may be empty), its weights, its output.
struct Product {
  const ops::ColumnWeights* cw;
  const ops::WeightView* w;
  float* y;
};

// Products that share the input xin ([n, n_in], already thresholded; `kept` of the last row,
// indices in s.idx). One token with column layouts reads only the kept inputs' weights, the
// input prepared once for all the products, in one parallel region; otherwise (a batch, a
// format without a column layout, or a density above kSparseMaxDensity) the dense products of
// the zeroed input, the same numbers up to activation rounding (tests/ops/sparse_gemv_test.cpp).
// fused: the products' rows stacked in one column layout (SparseLayer::qkv, gate_up), used
// instead of theirs when it exists; its rows are copied back to each product's output.
void sparse_products(const LayerPass& p, std::initializer_list<Product> ps, const float* xin,
                     int64_t n_in, int64_t kept, const ops::ColumnWeights* fused = nullptr) {
  ForwardScratch& s = p.s;
  bool sparse =
      p.n == 1 && static_cast<double>(kept) <= kSparseMaxDensity * static_cast<double>(n_in);
  if (fused != nullptr && fused->n_rows == 0) fused = nullptr;
  for (const Product& q : ps) sparse = sparse && (fused != nullptr || q.cw->n_rows > 0);
  if (!sparse) {
    for (const Product& q : ps) {
      ops::matmul(*q.w, xin, p.n, n_in, q.y, q.w->n_rows, p.pool, s.mm);
      p.count(dense_bytes(*q.w), dense_bytes(*q.w));
    }
    return;
  }
  if (fused != nullptr) {
    ops::prepare_sparse_input(xin, s.idx.data(), kept, n_in, s.sparse.input,
                              ops::needs_q4_input(*fused));
    s.fused.resize(static_cast<size_t>(fused->n_rows));
    ops::sparse_gemv(*fused, s.sparse.input, s.fused.data(), p.pool, s.sparse);
    p.count(ops::sparse_bytes_read(*fused, s.sparse.input), 0);
    const float* from = s.fused.data();
    for (const Product& q : ps) {
      std::copy(from, from + q.w->n_rows, q.y);
      from += q.w->n_rows;
      p.count(0, dense_bytes(*q.w));
    }
    return;
  }
  bool for_q4 = false;
  for (const Product& q : ps) for_q4 = for_q4 || ops::needs_q4_input(*q.cw);
  ops::prepare_sparse_input(xin, s.idx.data(), kept, n_in, s.sparse.input, for_q4);
  for (const Product& q : ps) {
    p.count(ops::sparse_bytes_read(*q.cw, s.sparse.input), dense_bytes(*q.w));
  }
  const Product* q = ps.begin();
  if (ps.size() == 1) {
    ops::sparse_gemv(*q[0].cw, s.sparse.input, q[0].y, p.pool, s.sparse);
  } else if (ps.size() == 2) {
    ops::sparse_gemv({{q[0].cw, q[0].y}, {q[1].cw, q[1].y}}, s.sparse.input, p.pool, s.sparse);
  } else {
    ops::sparse_gemv({{q[0].cw, q[0].y}, {q[1].cw, q[1].y}, {q[2].cw, q[2].y}}, s.sparse.input,
                     p.pool, s.sparse);
  }
}

// TEAL's MLP for one token, when gate/up are stacked in one Q4 column layout
// (SparseLayer::gate_up) and down has a column layout. The input is thresholded and prepared
// once; then each thread takes a range of neurons (multiples of 128 rows, the Q4 row tile) and,
// without waiting for the others, computes their gate and up rows, SwiGLU, the threshold at the
// down projection's input, that range's prepared input and its product with down's columns
// into a partial output; the partials are added in range order into s.proj. No neuron's
// activation crosses to another thread, and the thread that posts the region does not prepare
// down's input alone while the others wait (measured against the separate products in
// docs/SPARSITY.md; the float formats keep the separate products, which are faster for them).
// The values equal the separate products' (gate/up bit for bit; down up to the order of the
// float sums of its ranges; down runs sparsely at any density: its kernels match or beat the
// dense product even at full density). `kept`: the input's kept count, its indices in s.idx.
// Returns false (nothing done) when the format, the shapes or the input's density (above
// kSparseMaxDensity the dense products run) do not allow it; the caller then runs the separate
// products.
bool mlp_teal_by_neurons(const LayerPass& p, int64_t kept) {
  const HParams& hp = p.hp;
  const SparseLayer& layer = *p.sparse;
  ForwardScratch& s = p.s;
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff;
  constexpr int64_t kTile = 128;
  if (!ops::needs_q4_input(layer.gate_up) || layer.gate_up.n_rows != 2 * n_ff ||
      layer.down.n_rows != n_embd || n_ff % kTile != 0 ||
      static_cast<double>(kept) > kSparseMaxDensity * static_cast<double>(n_embd)) {
    return false;
  }
  ops::prepare_sparse_input(s.xn.data(), s.idx.data(), kept, n_embd, s.sparse.input,
                            ops::needs_q4_input(layer.gate_up));
  const int64_t tiles = n_ff / kTile;
  constexpr int64_t kMaxRanges = 64;
  const int64_t n_ranges = std::min<int64_t>({p.pool.size(), tiles, kMaxRanges});
  const bool q4_down = ops::needs_q4_input(layer.down);
  s.fused.resize(static_cast<size_t>(2 * n_ff));
  s.ffn_idx.resize(static_cast<size_t>(n_ff));
  if (static_cast<int64_t>(s.ffn_in.size()) < n_ranges) s.ffn_in.resize(static_cast<size_t>(n_ranges));
  // Per range: a partial output (range 0 writes s.proj) and kernel scratch (the float kernels
  // need one float per row of the call).
  const int64_t per = n_embd + std::max(n_ff, n_embd);
  s.ffn_acc.resize(static_cast<size_t>(n_ranges * per));
  int64_t kept_of[kMaxRanges] = {};
  uint64_t bytes_of[kMaxRanges] = {};
  const ops::SparseGemvFn kernel = ops::sparse_gemv_kernel(active_isa());
  const float t_act = layer.thresholds[sparsity::kFfnAct];
  const auto& ffn_input = s.sparse.input;
  p.pool.run_chunks(n_ranges, [&](int64_t c, int) {
    const int64_t n0 = tiles * c / n_ranges * kTile, n1 = tiles * (c + 1) / n_ranges * kTile;
    float* acc = s.ffn_acc.data() + c * per;
    float* scratch = acc + n_embd;
    const int64_t n_kb = static_cast<int64_t>(ffn_input.blocks.size());
    kernel(layer.gate_up, ffn_input, 0, n_kb, n0, n1, s.fused.data(), scratch);
    kernel(layer.gate_up, ffn_input, 0, n_kb, n_ff + n0, n_ff + n1, s.fused.data(), scratch);
    float* act = s.gate.data();
    gated_act(p.hp, s.fused.data() + n0, s.fused.data() + n_ff + n0, n1 - n0, act + n0);
    int32_t* idx = s.ffn_idx.data() + n0;
    const int64_t k = apply_threshold(act + n0, n1 - n0, t_act, idx);
    for (int64_t i = 0; i < k; ++i) idx[i] += static_cast<int32_t>(n0);
    kept_of[c] = k;
    ops::SparseInput& in = s.ffn_in[static_cast<size_t>(c)];
    ops::prepare_sparse_input_range(act, idx, k, n_ff, n0, n1, in, q4_down);
    float* y = c == 0 ? s.proj.data() : acc;
    kernel(layer.down, in, 0, static_cast<int64_t>(in.blocks.size()), 0, n_embd, y, scratch);
    bytes_of[c] = 2 * ops::sparse_bytes_read(layer.gate_up, ffn_input, n0, n1) +
                  ops::sparse_bytes_read(layer.down, in);
  });
  int64_t total = 0;
  for (int64_t c = 0; c < n_ranges; ++c) {
    total += kept_of[c];
    s.counters.block_bytes_read += bytes_of[c];
  }
  s.counters.block_bytes_dense +=
      dense_bytes(p.L.ffn_gate) + dense_bytes(p.L.ffn_up) + dense_bytes(p.L.ffn_down);
  for (int64_t c = 1; c < n_ranges; ++c) {
    const float* acc = s.ffn_acc.data() + c * per;
    for (int64_t r = 0; r < n_embd; ++r) s.proj[r] += acc[r];
  }
  s.counters.kept[sparsity::kFfnAct] += static_cast<uint64_t>(total);
  s.counters.seen[sparsity::kFfnAct] += static_cast<uint64_t>(n_ff);
  return true;
}

}  // namespace

void qkv_teal(const LayerPass& p) {
  ForwardScratch& s = p.s;
  const SparseLayer& layer = *p.sparse;
  const int64_t kept = sparsify(p, s.xn.data(), p.hp.n_embd, sparsity::kAttnIn);
  sparse_products(p, {{&layer.wq, &p.L.wq, s.q.data()}, {&layer.wk, &p.L.wk, s.k.data()},
                      {&layer.wv, &p.L.wv, s.v.data()}},
                  s.xn.data(), p.hp.n_embd, kept, &layer.qkv);
}

void attn_output_teal(const LayerPass& p) {
  ForwardScratch& s = p.s;
  const int64_t n_q = p.hp.n_head * p.hp.head_dim;
  const int64_t kept = sparsify(p, s.attn.data(), n_q, sparsity::kAttnOut);
  sparse_products(p, {{&p.sparse->wo, &p.L.wo, s.proj.data()}}, s.attn.data(), n_q, kept);
}

void mlp_teal(const LayerPass& p) {
  ForwardScratch& s = p.s;
  const SparseLayer& layer = *p.sparse;
  const int64_t n_embd = p.hp.n_embd, n_ff = p.hp.n_ff;
  const int64_t kept_in = sparsify(p, s.xn.data(), n_embd, sparsity::kFfnIn);
  // One token, unobserved: the whole MLP by ranges of neurons where the layouts allow it (it
  // produces no gate / act intermediates to emit).
  if (p.n == 1 && !p.observed() && mlp_teal_by_neurons(p, kept_in)) return;
  sparse_products(p, {{&layer.gate, &p.L.ffn_gate, s.gate.data()}, {&layer.up, &p.L.ffn_up, s.up.data()}},
                  s.xn.data(), n_embd, kept_in, &layer.gate_up);
  p.emit(names::kFfnGate, s.gate.data(), n_ff);
  gated_act(p.hp, s.gate.data(), s.up.data(), p.n * n_ff, s.gate.data());
  p.emit(names::kFfnAct, s.gate.data(), n_ff);
  const int64_t kept_act = sparsify(p, s.gate.data(), n_ff, sparsity::kFfnAct);
  sparse_products(p, {{&layer.down, &p.L.ffn_down, s.proj.data()}}, s.gate.data(), n_ff, kept_act);
}

// CATS (and ReLU-fication, ReLU for SiLU): neurons with |act(gate)| < t are dropped. One token
// computes gate densely (it decides which neurons stay), then only the kept rows of up, and
// reads only the kept columns of down. A batch runs gate and up densely in one region and
// zeroes the dropped neurons (its union of kept neurons is dense).
void mlp_gate_cut(const LayerPass& p) {
  ForwardScratch& s = p.s;
  const SparseLayer& layer = *p.sparse;
  const LayerWeights& L = p.L;
  const int64_t n = p.n, n_ff = p.hp.n_ff;
  const bool one_token = n == 1;
  if (one_token) {
    p.matmul(L.ffn_gate, s.xn.data(), s.gate.data());
  } else {
    ops::matmul({{&L.ffn_gate, s.gate.data(), n_ff}, {&L.ffn_up, s.up.data(), n_ff}},
                s.xn.data(), n, p.hp.n_embd, p.pool, s.mm);
    for (const ops::WeightView* w : {&L.ffn_gate, &L.ffn_up}) p.count(dense_bytes(*w), dense_bytes(*w));
  }
  p.emit(names::kFfnGate, s.gate.data(), n_ff);
  int64_t kept = 0, total = 0;
  for (int64_t r = 0; r < n; ++r) {
    const float* g = s.gate.data() + r * n_ff;
    float* u = s.up.data() + r * n_ff;
    kept = 0;
    for (int64_t i = 0; i < n_ff; ++i) {
      if (layer.keep_gate(g[i])) {
        s.idx[kept++] = static_cast<int32_t>(i);
      } else {
        u[i] = 0.0f;  // act(g) * 0 = 0
      }
    }
    total += kept;
  }
  if (one_token) {
    ops::matmul_rows(L.ffn_up, s.xn.data(), s.idx.data(), kept, s.up.data(), p.pool, s.mm);
    p.count(static_cast<uint64_t>(kept) * L.ffn_up.row_bytes, dense_bytes(L.ffn_up));
  }
  s.counters.kept[sparsity::kGateAct] += static_cast<uint64_t>(total);
  s.counters.seen[sparsity::kGateAct] += static_cast<uint64_t>(n * n_ff);
  if (s.sparsity->method() == sparsity::Method::Relu) {
    for (int64_t i = 0; i < n * n_ff; ++i) {
      s.gate[i] = s.gate[i] > 0.0f ? s.gate[i] * s.up[i] : 0.0f;
    }
  } else {
    gated_act(p.hp, s.gate.data(), s.up.data(), n * n_ff, s.gate.data());
  }
  p.emit(names::kFfnAct, s.gate.data(), n_ff);
  sparse_products(p, {{&layer.down, &L.ffn_down, s.proj.data()}}, s.gate.data(), n_ff, kept);
}

}  // namespace squeeze::model
