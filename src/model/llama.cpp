#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

#include "core/error.h"
#include "model/names.h"
#include "ops/norm.h"

namespace squeeze::model {

namespace {

// A token that keeps more than this runs densely. The sparse products match or beat the dense
// ones up to full density on SmolLM2's shapes (sparse_gemv_bench, 2 threads, from DRAM,
// 2026-12-03: 0.9-1.7x at density 1, 1.8-2.3x at 0.5), but near full density the input's
// preparation (up to ~1 us) eats the gain.
constexpr double kSparseMaxDensity = 0.9;

// The bytes a dense product reads of w: the whole matrix.
uint64_t dense_bytes(const ops::WeightView& w) {
  return static_cast<uint64_t>(w.n_rows) * w.row_bytes;
}

std::string key(const HParams& hp, const char* suffix) { return hp.arch + "." + suffix; }

// Binds a weight matrix [n_in] -> [n_out] (ggml shape [n_in, n_out]) and checks it.
ops::WeightView bind_matrix(const gguf::File& f, const std::string& name, int64_t n_in,
                            int64_t n_out) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) throw FormatError(f.path() + ": missing tensor '" + name + "'");
  if (t->shape.size() != 2 || t->shape[0] != n_in || t->shape[1] != n_out) {
    throw FormatError(f.path() + ": tensor '" + name + "' has shape [" +
                      std::to_string(t->shape[0]) +
                      (t->shape.size() > 1 ? ", " + std::to_string(t->shape[1]) : "") +
                      "], expected [" + std::to_string(n_in) + ", " + std::to_string(n_out) + "]");
  }
  const auto& info = formats::format_info(t->type);
  if (!info.supported) {
    throw FormatError(f.path() + ": tensor '" + name + "' has type " + std::string(info.name) +
                      ", which squeeze cannot compute with yet");
  }
  ops::WeightView w;
  w.type = t->type;
  w.n_cols = n_in;
  w.n_rows = n_out;
  w.row_bytes = formats::row_bytes(t->type, n_in);
  w.data = static_cast<const uint8_t*>(t->data);
  return w;
}

// Binds a 1-D F32 vector of n elements.
const float* bind_vector(const gguf::File& f, const std::string& name, int64_t n) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) throw FormatError(f.path() + ": missing tensor '" + name + "'");
  if (t->shape.size() != 1 || t->shape[0] != n || t->type != formats::DType::F32) {
    throw FormatError(f.path() + ": tensor '" + name + "' must be f32 of shape [" +
                      std::to_string(n) + "]");
  }
  return static_cast<const float*>(t->data);
}

int64_t positive(const gguf::File& f, const std::string& k, int64_t v) {
  if (v <= 0 || v > (int64_t{1} << 24)) {
    throw FormatError(f.path() + ": metadata '" + k + "' has invalid value " + std::to_string(v));
  }
  return v;
}

}  // namespace

void load_llama(Model& m) {
  const gguf::File& f = m.file_;
  HParams& hp = m.hparams_;
  auto req = [&](const char* s) { return positive(f, key(hp, s), f.require_int(key(hp, s))); };
  hp.n_layer = req("block_count");
  hp.n_ctx_train = req("context_length");
  hp.n_embd = req("embedding_length");
  hp.n_ff = req("feed_forward_length");
  hp.n_head = req("attention.head_count");
  hp.n_head_kv = f.get_int(key(hp, "attention.head_count_kv")).value_or(hp.n_head);
  positive(f, key(hp, "attention.head_count_kv"), hp.n_head_kv);
  if (hp.n_head % hp.n_head_kv != 0) {
    throw FormatError(f.path() + ": head_count " + std::to_string(hp.n_head) +
                      " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
  }
  hp.head_dim = f.get_int(key(hp, "attention.key_length")).value_or(hp.n_embd / hp.n_head);
  positive(f, key(hp, "attention.key_length"), hp.head_dim);
  hp.n_rot = f.get_int(key(hp, "rope.dimension_count")).value_or(hp.head_dim);
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
    throw FormatError(f.path() + ": invalid rope.dimension_count " + std::to_string(hp.n_rot));
  }
  hp.rope_freq_base = static_cast<float>(f.get_float(key(hp, "rope.freq_base")).value_or(10000.0));
  hp.rms_eps = static_cast<float>(f.require_float(key(hp, "attention.layer_norm_rms_epsilon")));
  hp.rope_layout = ops::RopeLayout::Norm;

  const int64_t n_q = hp.n_head * hp.head_dim;
  const int64_t n_kv = hp.n_head_kv * hp.head_dim;

  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (embd == nullptr) throw FormatError(f.path() + ": missing tensor 'token_embd.weight'");
  if (embd->shape.size() != 2) throw FormatError(f.path() + ": token_embd.weight must be 2-D");
  hp.n_vocab = embd->shape[1];
  m.token_embd = bind_matrix(f, "token_embd.weight", hp.n_embd, hp.n_vocab);
  m.output_norm = bind_vector(f, "output_norm.weight", hp.n_embd);
  if (f.find_tensor("output.weight") != nullptr) {
    m.output = bind_matrix(f, "output.weight", hp.n_embd, hp.n_vocab);
  } else {
    m.output = m.token_embd;
    m.tied_output = true;
  }

  // Every layer has tensors of its own, so a block count beyond the tensor count is corrupt
  // (and must not size the layer table: up to 2^24 layers would be gigabytes).
  if (static_cast<uint64_t>(hp.n_layer) > f.tensors().size()) {
    throw FormatError(f.path() + ": block_count " + std::to_string(hp.n_layer) +
                      " is more than the file's " + std::to_string(f.tensors().size()) +
                      " tensors can hold");
  }
  m.layers.resize(hp.n_layer);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& L = m.layers[il];
    L.attn_norm = bind_vector(f, p + "attn_norm.weight", hp.n_embd);
    L.wq = bind_matrix(f, p + "attn_q.weight", hp.n_embd, n_q);
    L.wk = bind_matrix(f, p + "attn_k.weight", hp.n_embd, n_kv);
    L.wv = bind_matrix(f, p + "attn_v.weight", hp.n_embd, n_kv);
    L.wo = bind_matrix(f, p + "attn_output.weight", n_q, hp.n_embd);
    L.ffn_norm = bind_vector(f, p + "ffn_norm.weight", hp.n_embd);
    L.ffn_gate = bind_matrix(f, p + "ffn_gate.weight", hp.n_embd, hp.n_ff);
    L.ffn_up = bind_matrix(f, p + "ffn_up.weight", hp.n_embd, hp.n_ff);
    L.ffn_down = bind_matrix(f, p + "ffn_down.weight", hp.n_ff, hp.n_embd);
  }
}

void embed_llama(const Model& m, std::span<const int32_t> tokens, float* x) {
  const int64_t n_embd = m.hparams().n_embd;
  for (size_t t = 0; t < tokens.size(); ++t) {
    ops::dequantize_row(m.token_embd, tokens[t], x + static_cast<int64_t>(t) * n_embd);
  }
}

namespace {

// TEAL's MLP for one token, when gate/up are stacked in one Q4 column layout
// (SparseLayer::gate_up) and down has a column layout. The input is thresholded and prepared
// once; then each thread takes a range of neurons (multiples of 128 rows, the Q4 row tile) and,
// without waiting for the others, computes their gate and up rows, SwiGLU, the threshold at the
// down projection's input, that range's prepared input and its product with down's columns
// into a partial output; the partials are added in range order into s.proj. No neuron's
// activation crosses to another thread, and the thread that posts the region does not prepare
// down's input alone while the others wait. Measured 2026-12-03 (TEAL 0.5, tokens alternating
// between the two paths in one process): q4_0 -3..4.5% a token, q4_1 -1.5..3%; Q8_0 +5.5% (its
// float gate/up split by rows is slower: see sparse_gemv.cpp), so the float formats keep the
// separate products; 4 ranges on 2 threads +2..3% (more partial outputs).
// The values equal the separate products' (gate/up bit for bit; down up to the order of the
// float sums of its ranges; down runs sparsely at any density: its kernels match or beat the
// dense product even at full density). `kept`: the input's kept count, its indices in s.idx.
// Returns false (nothing done) when the format, the shapes or the input's density (above
// kSparseMaxDensity the dense products run) do not allow it; the caller then runs the separate
// products.
bool sparse_mlp_by_neurons(const HParams& hp, const LayerWeights& L, const SparseLayer& SL,
                           ForwardScratch& s, ThreadPool& pool, int64_t kept) {
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff;
  constexpr int64_t kTile = 128;
  if (!ops::needs_q4_input(SL.gate_up) || SL.gate_up.n_rows != 2 * n_ff ||
      SL.down.n_rows != n_embd || n_ff % kTile != 0 ||
      static_cast<double>(kept) > kSparseMaxDensity * static_cast<double>(n_embd)) {
    return false;
  }
  ops::prepare_sparse_input(s.xn.data(), s.idx.data(), kept, n_embd, s.sparse.input,
                            ops::needs_q4_input(SL.gate_up));
  const int64_t tiles = n_ff / kTile;
  constexpr int64_t kMaxRanges = 64;
  const int64_t n_ranges = std::min<int64_t>({pool.size(), tiles, kMaxRanges});
  const bool q4_down = ops::needs_q4_input(SL.down);
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
  const float t_act = SL.t[sparsity::kFfnAct];
  const auto& ffn_input = s.sparse.input;
  pool.run_chunks(n_ranges, [&](int64_t c, int) {
    const int64_t n0 = tiles * c / n_ranges * kTile, n1 = tiles * (c + 1) / n_ranges * kTile;
    float* acc = s.ffn_acc.data() + c * per;
    float* scratch = acc + n_embd;
    const int64_t n_kb = static_cast<int64_t>(ffn_input.blocks.size());
    kernel(SL.gate_up, ffn_input, 0, n_kb, n0, n1, s.fused.data(), scratch);
    kernel(SL.gate_up, ffn_input, 0, n_kb, n_ff + n0, n_ff + n1, s.fused.data(), scratch);
    float* act = s.gate.data();
    ops::swiglu(s.fused.data() + n0, s.fused.data() + n_ff + n0, n1 - n0, act + n0);
    int32_t* idx = s.ffn_idx.data() + n0;
    const int64_t k = apply_threshold(act + n0, n1 - n0, t_act, idx);
    for (int64_t i = 0; i < k; ++i) idx[i] += static_cast<int32_t>(n0);
    kept_of[c] = k;
    ops::SparseInput& in = s.ffn_in[static_cast<size_t>(c)];
    ops::prepare_sparse_input_range(act, idx, k, n_ff, n0, n1, in, q4_down);
    float* y = c == 0 ? s.proj.data() : acc;
    kernel(SL.down, in, 0, static_cast<int64_t>(in.blocks.size()), 0, n_embd, y, scratch);
    bytes_of[c] = 2 * ops::sparse_bytes_read(SL.gate_up, ffn_input, n0, n1) +
                  ops::sparse_bytes_read(SL.down, in);
  });
  int64_t total = 0;
  for (int64_t c = 0; c < n_ranges; ++c) {
    total += kept_of[c];
    s.counters.block_bytes_read += bytes_of[c];
  }
  s.counters.block_bytes_dense += dense_bytes(L.ffn_gate) + dense_bytes(L.ffn_up) + dense_bytes(L.ffn_down);
  for (int64_t c = 1; c < n_ranges; ++c) {
    const float* p = s.ffn_acc.data() + c * per;
    for (int64_t r = 0; r < n_embd; ++r) s.proj[r] += p[r];
  }
  s.counters.kept[sparsity::kFfnAct] += static_cast<uint64_t>(total);
  s.counters.seen[sparsity::kFfnAct] += static_cast<uint64_t>(n_ff);
  return true;
}

}  // namespace

// One transformer block on the residual stream s.x ([n, n_embd], in place). Every
// intermediate has a name (passed to the callback).
void forward_llama_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                         ThreadPool& pool, int64_t n, int64_t pos0,
                         const TensorCallback* callback) {
  std::vector<int32_t> pos;
  forward_llama_layer(m, il, kv, s, pool, single_sequence(n, static_cast<int32_t>(pos0), 0, pos),
                      callback);
}

void forward_llama_layer(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                         ThreadPool& pool, const ChunkLayout& b, const TensorCallback* callback) {
  const int64_t n = b.n;
  const HParams& hp = m.hparams();
  const int64_t n_embd = hp.n_embd;
  const int64_t n_q = hp.n_head * hp.head_dim;
  const int64_t n_kv = hp.n_head_kv * hp.head_dim;
  const int li = static_cast<int>(il);
  auto cb = [&](std::string_view name, const float* data, int64_t rows, int64_t width) {
    if (callback != nullptr && *callback) (*callback)(name, li, data, rows, width);
  };
  // Weight bytes of the block's products: read, and what the dense products would read.
  auto count = [&](uint64_t read, uint64_t dense) {
    s.counters.block_bytes_read += read;
    s.counters.block_bytes_dense += dense;
  };
  auto count_dense = [&](std::initializer_list<const ops::WeightView*> ws) {
    for (const ops::WeightView* w : ws) count(dense_bytes(*w), dense_bytes(*w));
  };
  auto mm = [&](const ops::WeightView& w, const float* x, float* y) {
    ops::matmul(w, x, n, w.n_cols, y, w.n_rows, pool, s.mm);
    count_dense({&w});
  };
  const ops::Rope rope(static_cast<int>(hp.n_rot), hp.rope_freq_base, hp.rope_layout);
  const ops::AttentionShape shape{static_cast<int>(hp.n_head), static_cast<int>(hp.n_head_kv),
                                  static_cast<int>(hp.head_dim),
                                  1.0f / std::sqrt(static_cast<float>(hp.head_dim))};
  const LayerWeights& L = m.layers[il];
  float* x = s.x.data();

  // --- attention block ---
  for (int64_t t = 0; t < n; ++t) {
    ops::rms_norm(x + t * n_embd, L.attn_norm, n_embd, hp.rms_eps, s.xn.data() + t * n_embd);
  }
  cb(names::kAttnNorm, s.xn.data(), n, n_embd);
  const ActSparsity* sp = s.sparsity;
  const SparseLayer* SL = sp != nullptr ? &sp->layer(il) : nullptr;
  const bool teal = sp != nullptr && sp->method() == sparsity::Method::Teal;
  // Zeroes the small entries of rows [0, n) of data at `site`; returns the kept count of the
  // last row, whose indices are in s.idx (what one token's sparse products need).
  auto sparsify = [&](float* data, int64_t width, int site) {
    int64_t kept = 0, total = 0;
    for (int64_t t = 0; t < n; ++t) {
      kept = apply_threshold(data + t * width, width, SL->t[site], s.idx.data());
      total += kept;
    }
    s.counters.kept[site] += static_cast<uint64_t>(total);
    s.counters.seen[site] += static_cast<uint64_t>(n * width);
    return kept;
  };
  // One token with column layouts: read only the kept inputs' weights, the input prepared once
  // for all the products that share it, in one parallel region; otherwise (a batch, or a
  // format without a column layout) the dense products of the zeroed input, the same numbers
  // up to activation rounding (tests/ops/sparse_gemv_test.cpp).
  struct Product {
    const ops::ColumnWeights* cw;
    const ops::WeightView* w;
    float* y;
  };
  // fused: the products' rows stacked in one column layout (SparseLayer::qkv, gate_up), used
  // instead of theirs when it exists; its rows are copied back to each product's output.
  auto smm = [&](std::initializer_list<Product> ps, const float* xin, int64_t n_in,
                 int64_t kept, const ops::ColumnWeights* fused = nullptr) {
    bool sparse = n == 1 && static_cast<double>(kept) <= kSparseMaxDensity * static_cast<double>(n_in);
    if (fused != nullptr && fused->n_rows == 0) fused = nullptr;
    for (const Product& p : ps) sparse = sparse && (fused != nullptr || p.cw->n_rows > 0);
    if (!sparse) {
      for (const Product& p : ps) {
        ops::matmul(*p.w, xin, n, n_in, p.y, p.w->n_rows, pool, s.mm);
        count_dense({p.w});
      }
      return;
    }
    if (fused != nullptr) {
      ops::prepare_sparse_input(xin, s.idx.data(), kept, n_in, s.sparse.input,
                                ops::needs_q4_input(*fused));
      s.fused.resize(static_cast<size_t>(fused->n_rows));
      ops::sparse_gemv(*fused, s.sparse.input, s.fused.data(), pool, s.sparse);
      count(ops::sparse_bytes_read(*fused, s.sparse.input), 0);
      const float* from = s.fused.data();
      for (const Product& p : ps) {
        std::copy(from, from + p.w->n_rows, p.y);
        from += p.w->n_rows;
        count(0, dense_bytes(*p.w));
      }
      return;
    }
    bool for_q4 = false;
    for (const Product& p : ps) for_q4 = for_q4 || ops::needs_q4_input(*p.cw);
    ops::prepare_sparse_input(xin, s.idx.data(), kept, n_in, s.sparse.input, for_q4);
    for (const Product& q : ps) count(ops::sparse_bytes_read(*q.cw, s.sparse.input), dense_bytes(*q.w));
    const Product* p = ps.begin();
    if (ps.size() == 1) {
      ops::sparse_gemv(*p[0].cw, s.sparse.input, p[0].y, pool, s.sparse);
    } else if (ps.size() == 2) {
      ops::sparse_gemv({{p[0].cw, p[0].y}, {p[1].cw, p[1].y}}, s.sparse.input, pool, s.sparse);
    } else {
      ops::sparse_gemv({{p[0].cw, p[0].y}, {p[1].cw, p[1].y}, {p[2].cw, p[2].y}},
                       s.sparse.input, pool, s.sparse);
    }
  };
  if (teal) {
    const int64_t kept = sparsify(s.xn.data(), n_embd, sparsity::kAttnIn);
    smm({{&SL->wq, &L.wq, s.q.data()}, {&SL->wk, &L.wk, s.k.data()}, {&SL->wv, &L.wv, s.v.data()}},
        s.xn.data(), n_embd, kept, &SL->qkv);
  } else {
    ops::matmul({{&L.wq, s.q.data(), n_q}, {&L.wk, s.k.data(), n_kv}, {&L.wv, s.v.data(), n_kv}},
                s.xn.data(), n, n_embd, pool, s.mm);
    count_dense({&L.wq, &L.wk, &L.wv});
  }
  if (!std::equal(b.pos.begin(), b.pos.end(), s.rope_pos.begin(), s.rope_pos.end())) {
    s.rope_cs.resize(static_cast<size_t>(n * hp.n_rot));
    for (int64_t t = 0; t < n; ++t) rope.angles(b.pos[t], s.rope_cs.data() + t * hp.n_rot);
    s.rope_pos.assign(b.pos.begin(), b.pos.end());
  }
  for (int64_t t = 0; t < n; ++t) {
    const float* cs = s.rope_cs.data() + t * hp.n_rot;
    rope.rotate(s.q.data() + t * n_q, static_cast<int>(hp.n_head), static_cast<int>(hp.head_dim),
                cs);
    rope.rotate(s.k.data() + t * n_kv, static_cast<int>(hp.n_head_kv),
                static_cast<int>(hp.head_dim), cs);
  }
  cb(names::kQ, s.q.data(), n, n_q);
  cb(names::kK, s.k.data(), n, n_kv);
  cb(names::kV, s.v.data(), n, n_kv);
  // Per sequence: its K and V into its cells, then attention over them. A sequence whose tokens
  // interleave with another's is gathered into consecutive rows and scattered back.
  for (const SeqRun& r : b.runs) {
    const int64_t len = static_cast<int64_t>(r.rows.size());
    const ops::KvView view = kv.view(il, r.seq, r.pos0 + len);
    if (r.contiguous()) {
      const int64_t r0 = r.rows.front();
      kv.store(il, kv.cell_of(r.seq, r.pos0), len, s.k.data() + r0 * n_kv, s.v.data() + r0 * n_kv);
      ops::attention(shape, s.q.data() + r0 * n_q, len, r.pos0, view, s.attn.data() + r0 * n_q,
                     pool, s.att);
      continue;
    }
    s.q_seq.resize(static_cast<size_t>(len * n_q));
    s.attn_seq.resize(static_cast<size_t>(len * n_q));
    for (int64_t i = 0; i < len; ++i) {
      const int64_t row = r.rows[i];
      kv.store(il, kv.cell_of(r.seq, r.pos0 + i), 1, s.k.data() + row * n_kv, s.v.data() + row * n_kv);
      std::copy_n(s.q.data() + row * n_q, n_q, s.q_seq.data() + i * n_q);
    }
    ops::attention(shape, s.q_seq.data(), len, r.pos0, view, s.attn_seq.data(), pool, s.att);
    for (int64_t i = 0; i < len; ++i) {
      std::copy_n(s.attn_seq.data() + i * n_q, n_q, s.attn.data() + r.rows[i] * n_q);
    }
  }
  cb(names::kKqvOut, s.attn.data(), n, n_q);
  if (teal) {
    const int64_t kept = sparsify(s.attn.data(), n_q, sparsity::kAttnOut);
    smm({{&SL->wo, &L.wo, s.proj.data()}}, s.attn.data(), n_q, kept);
  } else {
    mm(L.wo, s.attn.data(), s.proj.data());
  }
  cb(names::kAttnOut, s.proj.data(), n, n_embd);
  for (int64_t i = 0; i < n * n_embd; ++i) x[i] += s.proj[i];
  cb(names::kFfnInp, x, n, n_embd);

  // --- MLP block (SwiGLU) ---
  for (int64_t t = 0; t < n; ++t) {
    ops::rms_norm(x + t * n_embd, L.ffn_norm, n_embd, hp.rms_eps, s.xn.data() + t * n_embd);
  }
  cb(names::kFfnNorm, s.xn.data(), n, n_embd);
  const int64_t n_ff = hp.n_ff;
  const bool by_neurons = teal && n == 1 && (callback == nullptr || !*callback);
  int64_t kept_in = 0;
  if (teal) kept_in = sparsify(s.xn.data(), n_embd, sparsity::kFfnIn);
  if (by_neurons && sparse_mlp_by_neurons(hp, L, *SL, s, pool, kept_in)) {
    // done: the MLP ran as ranges of neurons, its output in s.proj
  } else if (teal) {
    smm({{&SL->gate, &L.ffn_gate, s.gate.data()}, {&SL->up, &L.ffn_up, s.up.data()}}, s.xn.data(),
        n_embd, kept_in, &SL->gate_up);
    cb(names::kFfnGate, s.gate.data(), n, n_ff);
    ops::swiglu(s.gate.data(), s.up.data(), n * n_ff, s.gate.data());
    cb(names::kFfnAct, s.gate.data(), n, n_ff);
    const int64_t kept_act = sparsify(s.gate.data(), n_ff, sparsity::kFfnAct);
    smm({{&SL->down, &L.ffn_down, s.proj.data()}}, s.gate.data(), n_ff, kept_act);
  } else if (sp != nullptr) {
    // CATS (and ReLU-fication, ReLU for SiLU): neurons with |act(gate)| < t are dropped. One
    // token computes gate densely (it decides which neurons stay), then only the kept rows of
    // up, and reads only the kept columns of down. A batch runs gate and up densely in one
    // region and zeroes the dropped neurons (its union of kept neurons is dense).
    const bool one_token = n == 1;
    if (one_token) {
      mm(L.ffn_gate, s.xn.data(), s.gate.data());
    } else {
      ops::matmul({{&L.ffn_gate, s.gate.data(), n_ff}, {&L.ffn_up, s.up.data(), n_ff}},
                  s.xn.data(), n, n_embd, pool, s.mm);
      count_dense({&L.ffn_gate, &L.ffn_up});
    }
    cb(names::kFfnGate, s.gate.data(), n, n_ff);
    const bool relu = sp->method() == sparsity::Method::Relu;
    int64_t kept = 0, total = 0;
    for (int64_t r = 0; r < n; ++r) {
      const float* g = s.gate.data() + r * n_ff;
      float* u = s.up.data() + r * n_ff;
      kept = 0;
      for (int64_t i = 0; i < n_ff; ++i) {
        if (SL->keep_gate(g[i])) {
          s.idx[kept++] = static_cast<int32_t>(i);
        } else {
          u[i] = 0.0f;  // act(g) * 0 = 0
        }
      }
      total += kept;
    }
    if (one_token) {
      ops::matmul_rows(L.ffn_up, s.xn.data(), s.idx.data(), kept, s.up.data(), pool, s.mm);
      count(static_cast<uint64_t>(kept) * L.ffn_up.row_bytes, dense_bytes(L.ffn_up));
    }
    s.counters.kept[sparsity::kGateAct] += static_cast<uint64_t>(total);
    s.counters.seen[sparsity::kGateAct] += static_cast<uint64_t>(n * n_ff);
    if (relu) {
      for (int64_t i = 0; i < n * n_ff; ++i) {
        s.gate[i] = s.gate[i] > 0.0f ? s.gate[i] * s.up[i] : 0.0f;
      }
    } else {
      ops::swiglu(s.gate.data(), s.up.data(), n * n_ff, s.gate.data());
    }
    cb(names::kFfnAct, s.gate.data(), n, n_ff);
    smm({{&SL->down, &L.ffn_down, s.proj.data()}}, s.gate.data(), n_ff, kept);
  } else {
    ops::matmul({{&L.ffn_gate, s.gate.data(), n_ff}, {&L.ffn_up, s.up.data(), n_ff}},
                s.xn.data(), n, n_embd, pool, s.mm);
    count_dense({&L.ffn_gate, &L.ffn_up});
    cb(names::kFfnGate, s.gate.data(), n, n_ff);
    ops::swiglu(s.gate.data(), s.up.data(), n * n_ff, s.gate.data());
    cb(names::kFfnAct, s.gate.data(), n, n_ff);
    mm(L.ffn_down, s.gate.data(), s.proj.data());
  }
  cb(names::kFfnOut, s.proj.data(), n, n_embd);
  for (int64_t i = 0; i < n * n_embd; ++i) x[i] += s.proj[i];
  cb(names::kLOut, x, n, n_embd);
}

ChunkLayout single_sequence(int64_t n, int32_t pos0, int32_t seq, std::vector<int32_t>& pos) {
  pos.resize(static_cast<size_t>(n));
  ChunkLayout b;
  b.n = n;
  SeqRun r;
  r.seq = seq;
  r.pos0 = pos0;
  r.rows.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    pos[t] = pos0 + static_cast<int32_t>(t);
    r.rows[t] = static_cast<int32_t>(t);
  }
  b.pos = pos;
  if (n > 0) b.runs.push_back(std::move(r));
  return b;
}

// The forward pass of one chunk.
void forward_llama(const Model& m, kv::KvCache& kv, ForwardScratch& s, ThreadPool& pool,
                   const ForwardArgs& a) {
  const HParams& hp = m.hparams();
  const int64_t n = static_cast<int64_t>(a.tokens.size());
  const int64_t n_embd = hp.n_embd;
  auto cb = [&](std::string_view name, int il, const float* data, int64_t rows, int64_t width) {
    if (a.callback != nullptr && *a.callback) (*a.callback)(name, il, data, rows, width);
  };

  // inp_embd: [n, n_embd]
  float* x = s.x.data();
  embed_llama(m, a.tokens, x);
  cb(names::kInpEmbd, -1, x, n, n_embd);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    forward_llama_layer(m, il, kv, s, pool, *a.layout, a.callback);
  }

  // --- output head: only the rows whose logits are wanted ---
  if (a.logits == nullptr || a.logit_rows.empty()) return;
  const int64_t rows = static_cast<int64_t>(a.logit_rows.size());
  for (int64_t i = 0; i < rows; ++i) {
    ops::rms_norm(x + a.logit_rows[i] * n_embd, m.output_norm, n_embd, hp.rms_eps,
                  s.xn.data() + i * n_embd);
  }
  // Head sparsity (an extension of TEAL, asked for with --head-sparsity): the same threshold
  // rule on the head's input; one token reads only the kept inputs' columns.
  const SparseHead* head = s.sparsity != nullptr && s.sparsity->head().on ? &s.sparsity->head() : nullptr;
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
  cb(names::kResultNorm, -1, s.xn.data(), rows, n_embd);
  if (head != nullptr && rows == 1 && head->cols.n_rows > 0 &&
      static_cast<double>(head_kept) <= kSparseMaxDensity * static_cast<double>(n_embd)) {
    ops::prepare_sparse_input(s.xn.data(), s.idx.data(), head_kept, n_embd, s.sparse.input,
                              ops::needs_q4_input(head->cols));
    ops::sparse_gemv(head->cols, s.sparse.input, a.logits, pool, s.sparse);
  } else {
    ops::matmul(m.output, s.xn.data(), rows, n_embd, a.logits, hp.n_vocab, pool, s.mm);
  }
  cb(names::kResultOutput, -1, a.logits, rows, hp.n_vocab);
}

}  // namespace squeeze::model
