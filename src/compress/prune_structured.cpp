#include "compress/prune_structured.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "compress/output.h"
#include "compress/prefill_calib.h"
#include "compress/structured_stats.h"
#include "compress/taylor.h"
#include "core/error.h"
#include "formats/format.h"
#include "model/arch.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/names.h"

namespace squeeze::compress {

namespace {

using formats::DType;

constexpr std::string_view kPrefix = "squeeze.pruning.";

std::string layer_name(int64_t il, std::string_view suffix) { return model::layer_prefix(il) + std::string(suffix); }

// A tensor of the output: the source's bytes (src set) or new ones.
struct OutTensor {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> shape;
  const gguf::TensorInfo* src = nullptr;
  std::vector<uint8_t> bytes;
  std::string after;  // a tensor the source lacks: written after this one
};

OutTensor same(const gguf::TensorInfo& t, std::string name) {
  return {std::move(name), t.type, t.shape, &t, {}, {}};
}

// Rows `keep` (ascending) of t, byte for byte.
OutTensor keep_rows(const gguf::TensorInfo& t, const std::vector<int64_t>& keep) {
  const size_t rb = formats::row_bytes(t.type, t.shape[0]);
  OutTensor o{t.name, t.type, t.shape, nullptr, std::vector<uint8_t>(rb * keep.size()), {}};
  for (size_t r = 0; r < keep.size(); ++r) {
    std::copy_n(static_cast<const uint8_t*>(t.data) + keep[r] * rb, rb, o.bytes.data() + r * rb);
  }
  o.shape[1] = static_cast<int64_t>(keep.size());
  return o;
}

// Of every row of t, the columns of the spans `keep` (ascending; span s is columns [s * width,
// (s + 1) * width)): whole blocks copied where width is a multiple of the type's block, the
// row otherwise decoded and stored as q8_0 (f32 where the kept width is not a multiple of 32).
OutTensor keep_columns(const gguf::TensorInfo& t, const std::vector<int64_t>& keep, int64_t width,
                       ThreadPool& pool) {
  const int64_t cols = t.shape[0], rows = tensor_rows(t), n = width * static_cast<int64_t>(keep.size());
  const int64_t block = formats::format_info(t.type).block_size;
  OutTensor o{t.name, t.type, t.shape, nullptr, {}, {}};
  o.shape[0] = n;
  if (width % block == 0) {
    const size_t rb = formats::row_bytes(t.type, cols), span_bytes = formats::row_bytes(t.type, width);
    const size_t orb = span_bytes * keep.size();
    o.bytes.resize(orb * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = static_cast<const uint8_t*>(t.data) + r * rb;
      for (size_t s = 0; s < keep.size(); ++s) {
        std::copy_n(row + keep[s] * span_bytes, span_bytes, o.bytes.data() + r * orb + s * span_bytes);
      }
    }
    return o;
  }
  const std::vector<float> w = decode_rows(t.type, t.data, cols, rows, pool);
  o.type = n % 32 == 0 ? DType::Q8_0 : DType::F32;
  const size_t orb = formats::row_bytes(o.type, n);
  o.bytes.resize(orb * static_cast<size_t>(rows));
  pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1, int) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = r0; r < r1; ++r) {
      for (size_t s = 0; s < keep.size(); ++s) {
        std::copy_n(w.data() + r * cols + keep[s] * width, width, row.data() + s * width);
      }
      formats::kernels(o.type).quantize_row_ref(row.data(), o.bytes.data() + r * orb, n);
    }
  });
  return o;
}

// The `kept` units of highest score, ascending (ties: the earlier unit).
std::vector<int64_t> top_units(const std::vector<double>& score, int64_t kept) {
  std::vector<int64_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  order.resize(static_cast<size_t>(kept));
  std::sort(order.begin(), order.end());
  return order;
}

// Σ|w[r, c]| · norm[c] over rows [r0, r1) and every column (norm empty: 1).
double abs_sum_rows(const std::vector<float>& w, int64_t cols, int64_t r0, int64_t r1,
                    const std::vector<float>& norm) {
  double s = 0.0;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      s += std::fabs(w[r * cols + c]) * (norm.empty() ? 1.0 : norm[c]);
    }
  }
  return s;
}

// FLAP's bias compensation: b[i] = (the source's bias) + Σ over the removed columns c of
// w[i, c] · mean[c], written as an f32 tensor `name` (after `after` when the source lacks it).
OutTensor compensation_bias(const gguf::File& f, const std::string& name, const std::string& after,
                            const std::vector<float>& w, int64_t rows, int64_t cols,
                            const std::vector<uint8_t>& kept, const std::vector<double>& mean) {
  std::vector<double> b(static_cast<size_t>(rows), 0.0);
  if (const gguf::TensorInfo* t = f.find_tensor(name)) {
    if (t->type != DType::F32 || t->n_elements != rows) throw UsageError(f.path() + ": " + name + " is not f32 [" + std::to_string(rows) + "]");
    for (int64_t i = 0; i < rows; ++i) b[i] = static_cast<const float*>(t->data)[i];
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      if (!kept[c]) b[i] += static_cast<double>(w[i * cols + c]) * mean[c];
    }
  }
  OutTensor o{name, DType::F32, {rows}, nullptr, std::vector<uint8_t>(static_cast<size_t>(rows) * 4), {}};
  for (int64_t i = 0; i < rows; ++i) {
    const auto v = static_cast<float>(b[i]);
    std::memcpy(o.bytes.data() + i * 4, &v, 4);
  }
  if (f.find_tensor(name) == nullptr) o.after = after;
  return o;
}

const gguf::TensorInfo& need(const gguf::File& f, const std::string& name, Structure s) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) {
    throw UsageError(f.path() + ": --structure " + std::string(structure_name(s)) + " needs " + name);
  }
  return *t;
}

// The ffn structure: every layer's gate / up / down (source order kept by the caller).
void prune_ffn(const model::Model& m, const StructuredPruneOptions& o, const Calibration& cal,
               StructuredPruneStats& st, std::vector<OutTensor>& out, ThreadPool& pool) {
  const gguf::File& f = m.file();
  const int64_t n_embd = m.hparams().n_embd, n_ff = st.units_before;
  for (int64_t il = 0; il < m.hparams().n_layer; ++il) {
    if (cancelled(o.cancel)) throw Interrupted("interrupted; no output written");
    const gguf::TensorInfo& gate = need(f, layer_name(il, "ffn_gate.weight"), o.structure);
    const gguf::TensorInfo& up = need(f, layer_name(il, "ffn_up.weight"), o.structure);
    const gguf::TensorInfo& down = need(f, layer_name(il, "ffn_down.weight"), o.structure);
    const std::vector<float> g = decode_rows(gate.type, gate.data, n_embd, n_ff, pool);
    const std::vector<float> u = decode_rows(up.type, up.data, n_embd, n_ff, pool);
    const std::vector<float> d = decode_rows(down.type, down.data, n_ff, n_embd, pool);
    const bool given = !o.keep.empty();
    const bool wanda = o.criterion == Criterion::Wanda && !given, flap = o.criterion == Criterion::Flap && !given;
    const std::vector<float> none;
    const std::vector<float>& in = wanda ? cal.row_norm[il] : none;
    std::vector<double> score(static_cast<size_t>(given ? 0 : n_ff), 0.0);
    if (!given) pool.parallel_for(n_ff, 16, [&](int64_t j0, int64_t j1, int) {
      for (int64_t j = j0; j < j1; ++j) {
        double sd = 0.0, sd2 = 0.0;
        for (int64_t i = 0; i < n_embd; ++i) {
          sd += std::fabs(d[i * n_ff + j]);
          sd2 += static_cast<double>(d[i * n_ff + j]) * d[i * n_ff + j];
        }
        score[j] = o.criterion == Criterion::Taylor ? cal.importance[il][j]
                   : flap ? cal.var[il][j] * sd2
                          : abs_sum_rows(g, n_embd, j, j + 1, in) + abs_sum_rows(u, n_embd, j, j + 1, in) +
                              sd * (wanda ? cal.unit_norm[il][j] : 1.0);
      }
    });
    const std::vector<int64_t> keep = given ? o.keep[il] : top_units(score, st.units_after);
    if (static_cast<int64_t>(keep.size()) != st.units_after || !std::is_sorted(keep.begin(), keep.end()) ||
        keep.front() < 0 || keep.back() >= n_ff || std::adjacent_find(keep.begin(), keep.end()) != keep.end()) {
      throw FormatError(f.path() + ": the neurons kept in layer " + std::to_string(il) + " are not " +
                        std::to_string(st.units_after) + " distinct ascending indices below " + std::to_string(n_ff));
    }
    st.kept.push_back(keep);
    out.push_back(keep_rows(gate, keep));
    out.push_back(keep_rows(up, keep));
    out.push_back(keep_columns(down, keep, 1, pool));
    if (flap) {
      std::vector<uint8_t> kept(static_cast<size_t>(n_ff), 0);
      for (int64_t j : keep) kept[j] = 1;
      out.push_back(compensation_bias(f, layer_name(il, "ffn_down.bias"), down.name, d, n_embd, n_ff,
                                      kept, cal.mean[il]));
    }
    if (o.log && !given) {
      o.log("blk." + std::to_string(il) + ": " + std::to_string(st.units_after) + " of " +
                std::to_string(n_ff) + " neurons kept", false);
    }
  }
}

// The heads structure: every layer's q / k / v (and biases) and output. Query head h reads KV
// head h / (n_head / n_head_kv), as in llama.cpp.
void prune_heads(const model::Model& m, const StructuredPruneOptions& o, const Calibration& cal,
                 StructuredPruneStats& st, std::vector<OutTensor>& out, ThreadPool& pool) {
  const gguf::File& f = m.file();
  const model::HParams& hp = m.hparams();
  const int64_t n_embd = hp.n_embd, hd = hp.head_dim, n_kv = hp.n_head_kv, rep = hp.n_head / n_kv;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (cancelled(o.cancel)) throw Interrupted("interrupted; no output written");
    const gguf::TensorInfo& tq = need(f, layer_name(il, "attn_q.weight"), o.structure);
    const gguf::TensorInfo& tk = need(f, layer_name(il, "attn_k.weight"), o.structure);
    const gguf::TensorInfo& tv = need(f, layer_name(il, "attn_v.weight"), o.structure);
    const gguf::TensorInfo& to = need(f, layer_name(il, "attn_output.weight"), o.structure);
    const std::vector<float> q = decode_rows(tq.type, tq.data, n_embd, hp.n_head * hd, pool);
    const std::vector<float> k = decode_rows(tk.type, tk.data, n_embd, n_kv * hd, pool);
    const std::vector<float> v = decode_rows(tv.type, tv.data, n_embd, n_kv * hd, pool);
    const std::vector<float> w_o = decode_rows(to.type, to.data, hp.n_head * hd, n_embd, pool);
    const bool wanda = o.criterion == Criterion::Wanda, flap = o.criterion == Criterion::Flap;
    const int64_t n_q = hp.n_head * hd;
    const std::vector<float> none;
    const std::vector<float>& in = wanda ? cal.row_norm[il] : none;
    std::vector<double> score(static_cast<size_t>(n_kv), 0.0);
    for (int64_t g = 0; g < n_kv; ++g) {
      if (!flap) {
        score[g] = abs_sum_rows(q, n_embd, g * rep * hd, (g + 1) * rep * hd, in) +
                   abs_sum_rows(k, n_embd, g * hd, (g + 1) * hd, in) +
                   abs_sum_rows(v, n_embd, g * hd, (g + 1) * hd, in);
      }
      for (int64_t i = 0; i < n_embd; ++i) {
        for (int64_t c = g * rep * hd; c < (g + 1) * rep * hd; ++c) {
          const double wc = w_o[i * n_q + c];
          score[g] += flap ? cal.var[il][c] * wc * wc : std::fabs(wc) * (wanda ? cal.unit_norm[il][c] : 1.0);
        }
      }
    }
    const std::vector<int64_t> groups = top_units(score, st.units_after);
    std::vector<int64_t> heads, q_rows, kv_rows;
    for (int64_t g : groups) {
      for (int64_t h = g * rep; h < (g + 1) * rep; ++h) heads.push_back(h);
    }
    const auto rows_of = [hd](const std::vector<int64_t>& units) {
      std::vector<int64_t> rows;
      for (int64_t u : units) {
        for (int64_t r = u * hd; r < (u + 1) * hd; ++r) rows.push_back(r);
      }
      return rows;
    };
    out.push_back(keep_rows(tq, rows_of(heads)));
    out.push_back(keep_rows(tk, rows_of(groups)));
    out.push_back(keep_rows(tv, rows_of(groups)));
    out.push_back(keep_columns(to, heads, hd, pool));
    using Bias = std::pair<const char*, const std::vector<int64_t>*>;
    for (const auto& [suffix, units] : {Bias{"attn_q.bias", &heads}, Bias{"attn_k.bias", &groups},
                                        Bias{"attn_v.bias", &groups}}) {
      if (const gguf::TensorInfo* b = f.find_tensor(layer_name(il, suffix))) {
        out.push_back(keep_columns(*b, *units, hd, pool));
      }
    }
    if (flap) {
      std::vector<uint8_t> kept(static_cast<size_t>(n_q), 0);
      for (int64_t h : heads) std::fill_n(kept.begin() + h * hd, hd, uint8_t{1});
      out.push_back(compensation_bias(f, layer_name(il, "attn_output.bias"), to.name, w_o, n_embd, n_q,
                                      kept, cal.mean[il]));
    }
    if (o.log) {
      std::string kept;
      for (int64_t g : groups) {
        if (!kept.empty()) kept += ',';
        kept += std::to_string(g);
      }
      o.log("blk." + std::to_string(il) + ": KV groups kept " + kept + " of " + std::to_string(n_kv), false);
    }
  }
}

// The layers structure: ShortGPT's block influence on the calibration samples (each a chunk).
std::vector<uint8_t> layers_to_remove(const model::Model& m, const StructuredPruneOptions& o,
                                      const calib::CalibSamples& samples, StructuredPruneStats& st,
                                      std::vector<float>& bi, ThreadPool& pool) {
  std::vector<int32_t> tokens;
  for (const std::vector<int32_t>& s : samples.samples) tokens.insert(tokens.end(), s.begin(), s.end());
  const auto progress = [&](const std::string& stage, int64_t done, int64_t total) {
    if (o.log) o.log(stage + " " + std::to_string(done) + "/" + std::to_string(total) + " samples", true);
  };
  bi = block_influence(m, tokens, o.calib_samples, o.calib_ctx, pool, progress, o.cancel);
  std::vector<double> keep_score(bi.begin(), bi.end());
  const std::vector<int64_t> keep = top_units(keep_score, st.units_after);
  std::vector<uint8_t> removed(bi.size(), 1);
  for (int64_t il : keep) removed[il] = 0;
  for (size_t il = 0; il < bi.size(); ++il) {
    if (removed[il]) st.layers_removed.push_back(static_cast<int64_t>(il));
  }
  return removed;
}

}  // namespace

Structure parse_structure(std::string_view name) {
  if (name == "ffn") return Structure::Ffn;
  if (name == "heads") return Structure::Heads;
  if (name == "layers") return Structure::Layers;
  throw UsageError("--structure: ffn, heads or layers (got '" + std::string(name) + "')");
}

std::string_view structure_name(Structure s) {
  switch (s) {
    case Structure::Ffn: return "ffn";
    case Structure::Heads: return "heads";
    case Structure::Layers: return "layers";
  }
  return "?";
}

Criterion parse_criterion(Structure s, std::string_view name) {
  if (s == Structure::Layers) {
    if (name == "bi") return Criterion::BlockInfluence;
    throw UsageError("--structure layers ranks layers by --method bi (got '" + std::string(name) + "')");
  }
  if (name == "magnitude") return Criterion::Magnitude;
  if (name == "wanda") return Criterion::Wanda;
  if (name == "flap") return Criterion::Flap;
  if (name == "taylor" && s == Structure::Ffn) return Criterion::Taylor;
  throw UsageError("--structure " + std::string(structure_name(s)) + " ranks units by magnitude, wanda" +
                   (s == Structure::Ffn ? ", flap or taylor" : " or flap") + " (got '" + std::string(name) + "')");
}

std::string_view criterion_name(Criterion c) {
  switch (c) {
    case Criterion::Magnitude: return "magnitude";
    case Criterion::Wanda: return "wanda";
    case Criterion::Flap: return "flap";
    case Criterion::Taylor: return "taylor";
    case Criterion::BlockInfluence: return "bi";
  }
  return "?";
}

int64_t units_kept(int64_t n, double fraction, const char* what) {
  const int64_t kept = std::clamp<int64_t>(std::llround((1.0 - fraction) * static_cast<double>(n)), 1, n);
  if (kept >= n) {
    throw UsageError("--sparsity " + std::to_string(fraction) + " removes none of the " +
                     std::to_string(n) + " " + what);
  }
  return kept;
}

int64_t ffn_width_kept(int64_t n_ff, double fraction) {
  const double kept = (1.0 - fraction) * static_cast<double>(n_ff) / 32.0;
  const int64_t w = std::clamp<int64_t>(std::llround(kept) * 32, 32, n_ff / 32 * 32);
  if (w >= n_ff) {
    throw UsageError("--sparsity " + std::to_string(fraction) + " removes no whole group of 32 of " +
                     std::to_string(n_ff) + " neurons");
  }
  return w;
}

StructuredPruneStats prune_structured(const std::string& model_path, const std::string& out_path,
                                      const StructuredPruneOptions& o, ThreadPool& pool) {
  check_structured_options(o);
  std::unique_ptr<model::Model> m = model::Model::load(model_path);
  check_output_path(m->file(), out_path);
  StructuredPruneStats st;
  const gguf::Writer w = build_structured(*m, o, pool, st);
  write_output(w, out_path, o.cancel);
  return st;
}

void check_structured_options(const StructuredPruneOptions& o) {
  parse_criterion(o.structure, criterion_name(o.criterion));  // the pairing
  if (!(o.fraction > 0.0 && o.fraction < 1.0)) throw UsageError("--sparsity must be in (0, 1)");
  if (!o.keep.empty() && o.structure != Structure::Ffn) throw UsageError("kept units are given for ffn only");
}

gguf::Writer build_structured(const model::Model& model, const StructuredPruneOptions& o, ThreadPool& pool,
                              StructuredPruneStats& st) {
  check_structured_options(o);
  const model::Model* m = &model;
  const bool layers = o.structure == Structure::Layers;
  const gguf::File& src = m->file();
  const model::HParams& hp = m->hparams();
  const std::string what(structure_name(o.structure));
  if (hp.n_expert > 0) throw UsageError(src.path() + ": --structure " + what + " does not prune MoE models");

  st = {};
  std::vector<std::string> replaced;  // metadata keys written anew
  switch (o.structure) {
    case Structure::Ffn:
      st.units_before = hp.n_ff;
      st.units_after = o.keep.empty() ? ffn_width_kept(hp.n_ff, o.fraction) : static_cast<int64_t>(o.keep[0].size());
      replaced = {model::arch_key(hp, "feed_forward_length")};
      break;
    case Structure::Heads:
      if (hp.n_head_kv < 2) throw UsageError(src.path() + ": --structure heads needs 2 or more KV heads");
      st.units_before = hp.n_head_kv;
      st.units_after = units_kept(hp.n_head_kv, o.fraction, "KV groups");
      replaced = {model::arch_key(hp, "attention.head_count"), model::arch_key(hp, "attention.head_count_kv"),
                  model::arch_key(hp, "attention.key_length"), model::arch_key(hp, "attention.value_length")};
      break;
    case Structure::Layers:
      if (std::any_of(hp.swa_layer.begin(), hp.swa_layer.end(), [](uint8_t s) { return s != 0; })) {
        throw UsageError(src.path() + ": --structure layers cannot remove layers of a model with "
                         "sliding-window layers (llama.cpp places them by layer index)");
      }
      st.units_before = hp.n_layer;
      st.units_after = units_kept(hp.n_layer, o.fraction, "layers");
      replaced = {model::arch_key(hp, "block_count")};
      break;
  }

  Calibration cal;
  std::vector<OutTensor> changed;
  std::vector<uint8_t> removed;  // layers
  std::vector<float> bi;
  const bool ffn = o.structure == Structure::Ffn;
  const std::string_view row_input = ffn ? model::names::kFfnNorm : model::names::kAttnNorm;
  const std::string_view unit_input = ffn ? model::names::kFfnAct : model::names::kKqvOut;
  const bool given = !o.keep.empty();
  if (o.criterion != Criterion::Magnitude && !given) cal.samples = read_calibration_samples(*m, o);
  if ((o.criterion == Criterion::Wanda || o.criterion == Criterion::Flap) && !given) {
    channel_statistics(*m, o, row_input, unit_input, cal, pool);
  }
  if (o.criterion == Criterion::Taylor && !given) {
    const auto progress = [&](int64_t done, int64_t total) {
      if (o.log) o.log("taylor gradients " + std::to_string(done) + "/" + std::to_string(total) + " samples", true);
    };
    cal.importance = ffn_taylor_importance(*m, ffn_loss_gradients(*m, cal.samples.samples, pool, progress, o.cancel), pool);
  }
  if (ffn) {
    prune_ffn(*m, o, cal, st, changed, pool);
  } else if (o.structure == Structure::Heads) {
    prune_heads(*m, o, cal, st, changed, pool);
  } else {
    removed = layers_to_remove(*m, o, cal.samples, st, bi, pool);
  }
  if (cancelled(o.cancel)) throw Interrupted("interrupted; no output written");

  // Tensors in the source's order: replaced, renamed (layers) or the same.
  std::vector<OutTensor> tensors;
  for (const gguf::TensorInfo& t : src.tensors()) {
    st.bytes_in += t.n_bytes;
    st.params_before += static_cast<uint64_t>(t.n_elements);
    const auto it = std::find_if(changed.begin(), changed.end(), [&](const OutTensor& c) { return c.name == t.name; });
    if (it != changed.end()) {
      tensors.push_back(std::move(*it));
      it->name.clear();
      for (OutTensor& c : changed) {
        if (c.after != t.name) continue;
        tensors.push_back(std::move(c));
        c.name.clear();
        c.after.clear();
      }
      continue;
    }
    size_t rest = 0;
    const int64_t il = layers ? model::layer_of_name(t.name, rest) : -1;
    if (il < 0 || il >= hp.n_layer) {
      tensors.push_back(same(t, t.name));
    } else if (!removed[il]) {
      const auto renumbered = std::count(removed.begin(), removed.begin() + il, uint8_t{0});
      tensors.push_back(same(t, "blk." + std::to_string(renumbered) + t.name.substr(rest)));
    }
  }

  // Metadata: the source's, less the keys replaced, older pruning provenance, plans made for
  // the unpruned layers (squeeze.prefill.*, squeeze.sparsity.*) and per-domain masks
  // (squeeze.domains.*); per-layer arrays sliced.
  std::vector<std::string> skip_keys = replaced;
  skip_keys.push_back("general.file_type");
  std::vector<const gguf::KeyValue*> sliced;
  for (const gguf::KeyValue& kv : src.metadata()) {
    const std::string_view k = kv.key;
    if (k.starts_with(kPrefix) || k.starts_with("squeeze.prefill.") || k.starts_with("squeeze.sparsity.") ||
        k.starts_with("squeeze.domains.")) {
      skip_keys.push_back(kv.key);
    } else if (layers && kv.value.type == gguf::ValueType::Array &&
               kv.value.array_len == static_cast<uint64_t>(hp.n_layer) && k.starts_with(hp.arch + ".")) {
      if (kv.value.array_type == gguf::ValueType::String) {
        throw UsageError(src.path() + ": per-layer string array '" + kv.key + "' cannot be sliced");
      }
      skip_keys.push_back(kv.key);
      sliced.push_back(&kv);
    }
  }
  const std::vector<std::string_view> skip(skip_keys.begin(), skip_keys.end());
  gguf::Writer w(src.alignment());
  w.copy_metadata(src, skip);
  for (const gguf::KeyValue* kv : sliced) {
    const size_t es = gguf::value_type_size(kv->value.array_type);
    std::vector<uint8_t> packed;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      if (!removed[il]) packed.insert(packed.end(), kv->value.array_data + il * es, kv->value.array_data + (il + 1) * es);
    }
    w.add_array(kv->key, kv->value.array_type, packed);
  }
  switch (o.structure) {
    case Structure::Ffn: w.add_uint32(replaced[0], static_cast<uint32_t>(st.units_after)); break;
    case Structure::Heads:
      w.add_uint32(replaced[0], static_cast<uint32_t>(st.units_after * (hp.n_head / hp.n_head_kv)));
      w.add_uint32(replaced[1], static_cast<uint32_t>(st.units_after));
      w.add_uint32(replaced[2], static_cast<uint32_t>(hp.head_dim));
      w.add_uint32(replaced[3], static_cast<uint32_t>(hp.head_dim));
      break;
    case Structure::Layers: w.add_uint32(replaced[0], static_cast<uint32_t>(st.units_after)); break;
  }
  const std::string pre(kPrefix);
  w.add_string(pre + "structure", what);
  w.add_string(pre + "method", std::string(criterion_name(o.criterion)));
  w.add_float32(pre + "sparsity", static_cast<float>(o.fraction));
  w.add_uint32(pre + what + "_before", static_cast<uint32_t>(st.units_before));
  if (layers) {
    w.add_int32_array(pre + "layers_removed", {st.layers_removed.begin(), st.layers_removed.end()});
    w.add_float32_array(pre + "block_influence", bi);
  }
  if (o.criterion != Criterion::Magnitude) {
    w.add_string(pre + "calibration.file", std::filesystem::path(o.calib_path).filename().string());
    w.add_string(pre + "calibration.fnv1a64", cal.samples.text_hash);
    w.add_uint32(pre + "calibration.samples", static_cast<uint32_t>(o.calib_samples));
    w.add_uint32(pre + "calibration.ctx", static_cast<uint32_t>(o.calib_ctx));
    w.add_uint64(pre + "calibration.seed", o.seed);
  }
  for (const OutTensor& t : tensors) {
    const std::span<const uint8_t> bytes =
        t.src ? std::span<const uint8_t>(static_cast<const uint8_t*>(t.src->data), t.src->n_bytes)
              : std::span<const uint8_t>(t.bytes);
    w.add_tensor(t.name, t.type, t.shape, bytes);
    st.bytes_out += bytes.size();
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    st.params_after += static_cast<uint64_t>(n);
  }
  return w;
}

}  // namespace squeeze::compress
