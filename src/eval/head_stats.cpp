#include "eval/head_stats.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/fp16.h"
#include "model/context.h"
#include "model/names.h"

namespace squeeze::eval {

HeadStats head_stats(const model::Model& m, std::span<const int32_t> tokens,
                     const HeadStatsOptions& o, ThreadPool& pool) {
  const model::HParams& hp = m.hparams();
  if (o.ctx < 2 || o.n_chunks < 1 || o.head_chunk < 1 || o.probes < 1) {
    throw UsageError("heads: --ctx, --chunks, --head-chunk and probes must be positive");
  }
  if (static_cast<int64_t>(tokens.size()) < o.n_chunks * o.ctx) {
    throw UsageError("the text tokenizes to " + std::to_string(tokens.size()) + " tokens; " +
                     std::to_string(o.n_chunks) + " chunks of " + std::to_string(o.ctx) +
                     " need " + std::to_string(o.n_chunks * o.ctx));
  }
  HeadStats st;
  st.n_layer = hp.n_layer;
  st.n_head = hp.n_head;
  st.n_chunks = o.n_chunks;
  for (auto& s : st.score) s.assign(static_cast<size_t>(hp.n_layer * hp.n_head), 0.0f);
  std::array<std::vector<double>, kHeadScores.size()> sum;
  for (auto& s : sum) s.assign(static_cast<size_t>(hp.n_layer * hp.n_head), 0.0);
  int64_t n_segments = 0;

  const int64_t n_q = hp.n_head * hp.head_dim, n_kv = hp.n_head_kv * hp.head_dim;
  const float scale = hp.attn_scale > 0 ? hp.attn_scale : 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  std::vector<float> q;
  std::vector<f16_t> k, v;
  std::vector<int32_t> cells(static_cast<size_t>(o.ctx));
  for (int64_t j = 0; j < o.ctx; ++j) cells[j] = static_cast<int32_t>(j);
  std::vector<float> probe_q, score(static_cast<size_t>(hp.n_head));
  std::vector<int64_t> probe_pos;
  ops::HeadScoreScratch scratch;
  model::Context ctx(m, o.ctx, pool, o.ctx);
  // A chunk runs from an empty cache in one forward call, so the K and V rows the callback
  // sees for a layer are that layer's whole cache, at positions 0..ctx-1.
  ctx.set_callback([&](std::string_view name, int layer, const float* data, int64_t rows, int64_t) {
    if (name == model::names::kQ) q.assign(data, data + rows * n_q);
    if (name == model::names::kK || name == model::names::kV) {
      std::vector<f16_t>& dst = name == model::names::kK ? k : v;
      dst.resize(static_cast<size_t>(rows * n_kv));
      for (int64_t i = 0; i < rows * n_kv; ++i) dst[i] = f32_to_f16(data[i]);
    }
    if (name != model::names::kV) return;
    const ops::AttentionShape shape{static_cast<int>(hp.n_head), static_cast<int>(hp.n_head_kv),
                                    static_cast<int>(hp.head_dim), scale,
                                    hp.is_swa(layer) ? hp.n_swa : 0};
    const ops::KvView view{k.data(), v.data(), n_kv, std::span(cells).first(static_cast<size_t>(rows))};
    for (size_t kind = 0; kind < kHeadScores.size(); ++kind) {
      ops::prepare_head_scores(shape, kHeadScores[kind], view, rows, pool, scratch);
      for (int64_t t0 = 0; t0 < rows; t0 += o.head_chunk) {
        const int64_t n = std::min(o.head_chunk, rows - t0), n_probe = std::min(o.probes, n);
        probe_pos.resize(static_cast<size_t>(n_probe));
        probe_q.resize(static_cast<size_t>(n_probe * n_q));
        for (int64_t j = 0; j < n_probe; ++j) {
          const int64_t t = t0 + (j + 1) * n / n_probe - 1;
          probe_pos[j] = t;
          std::copy_n(q.data() + t * n_q, n_q, probe_q.data() + j * n_q);
        }
        ops::head_scores(shape, kHeadScores[kind], probe_q.data(), n_q, probe_pos, view,
                         score.data(), pool, scratch);
        for (int64_t h = 0; h < hp.n_head; ++h) sum[kind][layer * hp.n_head + h] += score[h];
        if (kind == 0 && layer == 0) ++n_segments;
      }
    }
  });
  for (int64_t c = 0; c < o.n_chunks; ++c) {
    if (o.interrupted && o.interrupted()) throw Error("interrupted");
    ctx.reset();
    ctx.decode_from(tokens.subspan(static_cast<size_t>(c * o.ctx), static_cast<size_t>(o.ctx)), o.ctx);
    st.tokens += o.ctx;
    if (o.progress) o.progress(c + 1, o.n_chunks);
  }
  for (size_t kind = 0; kind < kHeadScores.size(); ++kind) {
    for (size_t i = 0; i < sum[kind].size(); ++i) {
      st.score[kind][i] = static_cast<float>(sum[kind][i] / static_cast<double>(n_segments));
    }
  }
  return st;
}

}  // namespace squeeze::eval
