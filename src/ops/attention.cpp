#include "ops/attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "formats/format.h"
#include "ops/ggml_math.h"
#include "ops/pv.h"

namespace squeeze::ops {

void widen_key_blocks(const f16_t* k, int64_t stride, const int32_t* rows, int64_t n,
                      int64_t width, float* dst) {
  constexpr int64_t kRows = 16;
  for (int64_t j0 = 0; j0 < n; j0 += kRows) {
    float* block = dst + j0 * width;
    const int64_t n_rows = std::min(kRows, n - j0);
    for (int64_t c = 0; c < width; ++c) {
      float* d = block + c * kRows;
      int64_t j = 0;
      for (; j < n_rows; ++j) d[j] = f16_to_f32(k[rows[j0 + j] * stride + c]);
      for (; j < kRows; ++j) d[j] = 0.0f;
    }
  }
}

namespace {

// Up to kQkMaxHeads query heads of one kv head's group that run (attention's units of work).
struct HeadGroup {
  int hk = 0;
  int n_q = 0;
  bool consecutive = true;  // heads[h] == heads[0] + h
  int heads[kQkMaxHeads] = {};
};

// The groups of the heads that run, kv head by kv head, appended to out: without a mask, runs
// of kQkMaxHeads consecutive heads; with one, the kept heads of each group packed.
void head_groups(const AttentionShape& shape, const uint8_t* keep, std::vector<HeadGroup>& out) {
  const int group = shape.n_head / shape.n_head_kv;
  for (int hk = 0; hk < shape.n_head_kv; ++hk) {
    HeadGroup g;
    g.hk = hk;
    for (int h = hk * group; h < (hk + 1) * group; ++h) {
      if (keep != nullptr && keep[h] == 0) continue;
      if (g.n_q > 0 && g.heads[g.n_q - 1] != h - 1) g.consecutive = false;
      g.heads[g.n_q++] = h;
      if (g.n_q == kQkMaxHeads) {
        out.push_back(g);
        g = HeadGroup{};
        g.hk = hk;
      }
    }
    if (g.n_q > 0) out.push_back(g);
  }
}

// Zero output rows of the segment's dropped heads.
void zero_dropped_heads(const AttentionShape& shape, const HeadSegment& seg, float* out) {
  const int64_t hd = shape.head_dim;
  for (int64_t t = seg.t0; t < seg.t1; ++t) {
    for (int h = 0; h < shape.n_head; ++h) {
      if (seg.keep[h] == 0) std::fill_n(out + (t * shape.n_head + h) * hd, hd, 0.0f);
    }
  }
}

// Each query row and head on its own (one parallel_for over all of them): the path of one
// token, and of a batch where the widened path is not available.
void attend_rows(const AttentionShape& shape, std::span<const DecodeQuery> rows, SumOrder order,
                 ThreadPool& pool, AttentionScratch& scratch) {
  const int hd = shape.head_dim;
  const int group = shape.n_head / shape.n_head_kv;
  const auto& f16k = formats::kernels(formats::DType::F16);
  const AttentionKernels ak = attention_kernels(active_isa());
  int64_t max_kv = 0;
  for (const DecodeQuery& r : rows) {
    assert(r.kv.row_stride >= static_cast<int64_t>(shape.n_head_kv) * hd && r.kv.n() > r.pos);
    max_kv = std::max(max_kv, r.pos + 1);
  }
  // Per thread: scores [max_kv], q in half [hd], the 32 partial sums of P.V [32, hd], the
  // scores in half [max_kv] (floats hold two halves: the half counts are rounded up).
  const int64_t per_thread = max_kv + hd + 32 * hd + (max_kv + 1) / 2;
  scratch.per_thread.resize(static_cast<size_t>(per_thread) * pool.size());
  const int64_t n_units = static_cast<int64_t>(rows.size()) * shape.n_head;
  pool.parallel_for(n_units, 1, [&](int64_t i0, int64_t i1, int ith) {
    float* scores = scratch.per_thread.data() + ith * per_thread;
    auto* q16 = reinterpret_cast<f16_t*>(scores + max_kv);
    float* partial = scores + max_kv + hd;
    auto* scores16 = reinterpret_cast<f16_t*>(partial + 32 * hd);
    for (int64_t i = i0; i < i1; ++i) {
      const DecodeQuery& r = rows[static_cast<size_t>(i / shape.n_head)];
      const int h = static_cast<int>(i % shape.n_head);
      const int hk = h / group;
      if (r.head_keep != nullptr && r.head_keep[h] == 0) {
        std::fill_n(r.out + h * hd, hd, 0.0f);
        continue;
      }
      // causal, and within the window: positions lo..pos. The sums start at lo rounded down
      // to a multiple of 32, the positions before lo masked: llama.cpp's rows start at cell 0,
      // and its 8-lane softmax groups and 32 partial sums of P.V count from there.
      const int64_t lo = shape.window > 0 ? std::max<int64_t>(0, r.pos + 1 - shape.window) / 32 * 32 : 0;
      const int64_t n_masked = shape.window > 0 ? std::max<int64_t>(0, r.pos + 1 - shape.window) - lo : 0;
      const int64_t n_kv = r.pos + 1 - lo;
      const int64_t kv_stride = r.kv.row_stride;
      const int32_t* cells = r.kv.cells.data() + lo;  // position lo + j's row: cells[j]
      f16k.quantize_row(r.q + h * hd, q16, hd);
      if (order == SumOrder::VecDotF16) {
        ak.qk_f16(q16, r.kv.k + hk * hd, kv_stride, cells, n_kv, hd, shape.scale, scores);
      } else {
        for (int64_t j = 0; j < n_kv; ++j) {
          scores[j] = shape.scale * ak.dot_f16(r.kv.k + cells[j] * kv_stride + hk * hd, q16, hd, order);
        }
      }
      std::fill_n(scores, n_masked, -INFINITY);
      ak.softmax(scores, n_kv);
      // llama.cpp multiplies V by the probabilities rounded to half floats.
      f16k.quantize_row(scores, scores16, n_kv);
      f16k.dequantize_row(scores16, scores, n_kv);
      ak.pv(scores, r.kv.v + hk * hd, kv_stride, cells, n_kv, hd, order, partial, r.out + h * hd);
    }
  });
}

}  // namespace

void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, int64_t pos0,
               const KvView& kv, float* out, ThreadPool& pool, AttentionScratch& scratch,
               std::span<const HeadSegment> segments) {
  const HeadSegment all{0, n_tokens, nullptr};
  if (segments.empty()) segments = std::span(&all, 1);
  const int hd = shape.head_dim;
  const int64_t q_stride = static_cast<int64_t>(shape.n_head) * hd;
  const int64_t kv_stride = kv.row_stride;
  assert(kv_stride >= static_cast<int64_t>(shape.n_head_kv) * hd && kv.n() >= pos0 + n_tokens);
  const f16_t* k = kv.k;
  const f16_t* v = kv.v;
  const int32_t* cells = kv.cells.data();  // position j's row: cells[j]
  const int64_t n_ctx_used = pos0 + n_tokens;
  const auto& f16k = formats::kernels(formats::DType::F16);
  const AttentionKernels ak = attention_kernels(active_isa());
  // llama.cpp sums a batch in tinyBLAS's order and a single token in ggml_vec_dot_f16's.
  const SumOrder order = n_tokens > 1 ? SumOrder::TinyBlas : SumOrder::VecDotF16;
  // A batch widens the cache rows it reads to float once (exact), instead of converting every
  // K and V row again for every query token and head, and reads each row once per GQA group.
  const bool widen = n_tokens > 1 && ak.qk_f32 != nullptr && ak.pv_f32 != nullptr &&
                     hd % 8 == 0 && hd <= kPvF32MaxDim;
  if (widen) {
    // Rows of K and V ([n_ctx_used, kv_stride]), or with kv_blocked the keys in blocks of 16
    // transposed ([k_rows / 16, kv_stride, 16]) and the values of each kv head by partials
    // ([n_head_kv, 8, rows8, hd]: row j = 8 i + k at partial k, row i).
    const int64_t k_rows = (n_ctx_used + 15) / 16 * 16;
    const int64_t rows8 = (n_ctx_used + 7) / 8;
    const bool blocked = ak.kv_blocked;
    const int64_t k_stride = blocked ? 16 * kv_stride : kv_stride;
    const int64_t k_head_offset = (blocked ? 16 : 1) * hd;
    const int64_t v_stride = blocked ? rows8 : kv_stride;
    const int64_t v_head_offset = (blocked ? 8 * rows8 : 1) * hd;
    scratch.k32.resize(static_cast<size_t>(k_rows * kv_stride));
    scratch.v32.resize(static_cast<size_t>(8 * rows8 * kv_stride));
    pool.parallel_for(n_ctx_used, 16, [&](int64_t j0, int64_t j1, int) {
      float* k32 = scratch.k32.data() + j0 * kv_stride;
      if (!blocked) {
        for (int64_t j = j0; j < j1; ++j) {
          f16k.dequantize_row(k + cells[j] * kv_stride, scratch.k32.data() + j * kv_stride, kv_stride);
          f16k.dequantize_row(v + cells[j] * kv_stride, scratch.v32.data() + j * kv_stride, kv_stride);
        }
        return;
      }
      widen_key_blocks(k, kv_stride, cells + j0, j1 - j0, kv_stride, k32);
      for (int64_t j = j0; j < j1; ++j) {
        for (int hk = 0; hk < shape.n_head_kv; ++hk) {
          f16k.dequantize_row(v + cells[j] * kv_stride + hk * hd,
                              scratch.v32.data() + hk * v_head_offset + ((j % 8) * rows8 + j / 8) * hd, hd);
        }
      }
    });
    // Units of work: (a tile of up to kTokenTile tokens, kv head, up to kQkMaxHeads of the
    // query heads of its group that run): the tile's tokens share each key block while it is in
    // L1 (qk_tokens).
    constexpr int64_t kTokenTile = 8;
    // Per segment its head groups; the units: (first token, tokens, head group).
    struct Unit {
      int64_t t0;
      int n_tok;
      int32_t group;
    };
    std::vector<HeadGroup> groups;
    std::vector<Unit> units;
    for (const HeadSegment& seg : segments) {
      const auto g0 = static_cast<int32_t>(groups.size());
      head_groups(shape, seg.keep, groups);
      if (seg.keep != nullptr) zero_dropped_heads(shape, seg, out);
      for (int64_t t0 = seg.t0; t0 < seg.t1; t0 += kTokenTile) {
        for (auto g = g0; g < static_cast<int32_t>(groups.size()); ++g) {
          units.push_back({t0, static_cast<int>(std::min(kTokenTile, seg.t1 - t0)), g});
        }
      }
    }
    const int64_t per_token = kQkMaxHeads * (n_ctx_used + hd);
    // Per thread: per token scores [kQkMaxHeads, n_ctx_used] and q [kQkMaxHeads, hd]; the
    // scores in half; the output of heads that are not consecutive [kQkMaxHeads, hd].
    const int64_t per_thread = kTokenTile * per_token + (n_ctx_used + 1) / 2 + hd + kQkMaxHeads * hd;
    scratch.per_thread.resize(static_cast<size_t>(per_thread) * pool.size());
    pool.parallel_for(static_cast<int64_t>(units.size()), 1, [&](int64_t i0, int64_t i1, int ith) {
      float* scores = scratch.per_thread.data() + ith * per_thread;
      float* q32 = scores + kTokenTile * kQkMaxHeads * n_ctx_used;
      auto* half = reinterpret_cast<f16_t*>(q32 + kTokenTile * kQkMaxHeads * hd);
      float* gathered = q32 + kTokenTile * kQkMaxHeads * hd + (n_ctx_used + 1) / 2 + hd;
      for (int64_t i = i0; i < i1; ++i) {
        const Unit& u = units[static_cast<size_t>(i)];
        const int64_t t0 = u.t0;
        const int n_tok = u.n_tok;
        const HeadGroup& hg = groups[static_cast<size_t>(u.group)];
        const int hk = hg.hk;
        const int n_q = hg.n_q;
        const int h0 = hg.heads[0];
        int64_t n_kv[kTokenTile];
        for (int j = 0; j < n_tok; ++j) {
          const int64_t t = t0 + j;
          n_kv[j] = pos0 + t + 1;  // causal: positions 0..pos0+t
          for (int h = 0; h < n_q; ++h) {  // Q rounded to half, as llama.cpp converts it
            f16k.quantize_row(q + t * q_stride + hg.heads[h] * hd, half, hd);
            f16k.dequantize_row(half, q32 + (j * n_q + h) * hd, hd);
          }
        }
        const float* kh = scratch.k32.data() + hk * k_head_offset;
        // Per token j: q at q32 + j * n_q * hd, scores at scores + j * n_q * n_ctx_used.
        if (ak.qk_tokens != nullptr) {
          ak.qk_tokens(q32, n_tok, n_q, n_kv, kh, k_stride, hd, shape.scale, scores, n_ctx_used);
        } else {
          for (int j = 0; j < n_tok; ++j) {
            ak.qk_f32(q32 + j * n_q * hd, n_q, kh, k_stride, n_kv[j], hd, shape.scale,
                      scores + j * n_q * n_ctx_used, n_ctx_used);
          }
        }
        for (int j = 0; j < n_tok; ++j) {
          float* st = scores + j * n_q * n_ctx_used;
          // With a window, the positions before it get probability 0 (their products add 0).
          // The softmax starts at a multiple of 8 before the window, the positions there
          // masked: its 8-lane groups count from cell 0, as llama.cpp's.
          const int64_t lo =
              shape.window > 0 ? std::max<int64_t>(0, n_kv[j] - shape.window) : 0;
          const int64_t lo8 = lo / 8 * 8;
          for (int h = 0; h < n_q; ++h) {
            float* sh = st + h * n_ctx_used;
            std::fill(sh + lo8, sh + lo, -INFINITY);
            ak.softmax(sh + lo8, n_kv[j] - lo8);
            std::fill_n(sh, lo8, 0.0f);
            // llama.cpp multiplies V by the probabilities rounded to half floats.
            f16k.quantize_row(sh, half, n_kv[j]);
            f16k.dequantize_row(half, sh, n_kv[j]);
          }
          float* o = out + (t0 + j) * q_stride;
          ak.pv_f32(st, n_ctx_used, n_q, scratch.v32.data() + hk * v_head_offset, v_stride, n_kv[j],
                    hd, hg.consecutive ? o + h0 * hd : gathered);
          if (!hg.consecutive) {
            for (int h = 0; h < n_q; ++h) std::copy_n(gathered + h * hd, hd, o + hg.heads[h] * hd);
          }
        }
      }
    });
    return;
  }

  std::vector<DecodeQuery> rows(static_cast<size_t>(n_tokens));
  for (const HeadSegment& seg : segments) {
    for (int64_t t = seg.t0; t < seg.t1; ++t) {
      rows[t] = {q + t * q_stride, pos0 + t, kv, out + t * q_stride, seg.keep};
    }
  }
  attend_rows(shape, rows, order, pool, scratch);
}

void attention_decode(const AttentionShape& shape, std::span<const DecodeQuery> queries,
                      ThreadPool& pool, AttentionScratch& scratch) {
  attend_rows(shape, queries, SumOrder::VecDotF16, pool, scratch);
}

}  // namespace squeeze::ops
