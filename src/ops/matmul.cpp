#include "ops/matmul.h"

#include <algorithm>
#include <array>

namespace squeeze::ops {

namespace {

constexpr size_t kMaxGroup = 4;
constexpr int64_t kDecodeRowsPerChunk = 256;

// How one matrix of a group is multiplied: the kernel and where its rows go.
struct Plan {
  const WeightView* w;
  float* y;
  int64_t y_stride;
  formats::GemmFn gemm;                                  // or null: loop over vec_dot
  float (*vec_dot)(int64_t, const void*, const void*);
  int64_t first_chunk;                                   // chunks [first_chunk, next plan's)
  int64_t rows_per_chunk;
};

// Rows [r0, r1) of one matrix against every token.
void run_rows(const Plan& p, const uint8_t* xq, size_t x_row_bytes, int64_t n_tokens, int64_t r0,
              int64_t r1) {
  const WeightView& w = *p.w;
  if (p.gemm != nullptr) {
    p.gemm(w.n_cols, w.row(r0), w.row_bytes, r1 - r0, xq, x_row_bytes, n_tokens, p.y + r0,
           p.y_stride);
    return;
  }
  // A tile of rows is multiplied by every token before moving on, so the weight tile stays in
  // cache while the tokens stream by.
  constexpr int64_t kRowTile = 16;
  for (int64_t rt = r0; rt < r1; rt += kRowTile) {
    const int64_t rt_end = std::min(r1, rt + kRowTile);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const uint8_t* xrow = xq + t * x_row_bytes;
      float* yrow = p.y + t * p.y_stride;
      for (int64_t r = rt; r < rt_end; ++r) yrow[r] = p.vec_dot(w.n_cols, w.row(r), xrow);
    }
  }
}

// Where llama.cpp would repack this matrix, sum in its repacked kernels' order; where the tier
// has a block order of its own, in that, unless the matrix keeps llama.cpp's.
bool sums_repacked(const formats::Kernels& wk, const WeightView& w) {
  return wk.vec_dot_repacked != nullptr && w.n_rows % formats::kRepackRows == 0 &&
         !(wk.own_order && w.llama_order);
}

const formats::BatchGemm& batch_gemm(const WeightView& w) {
  const auto& wk = formats::kernels(w.type);
  return sums_repacked(wk, w) ? wk.batch_repacked : wk.batch;
}

// The batch kernels every product of the group shares, or null (then the activations are
// converted to vec_dot_type rows).
const formats::BatchGemm* shared_batch_gemm(std::initializer_list<MatmulOut> outs, int64_t n_tokens) {
  if (n_tokens < formats::kBatchGroup) return nullptr;
  const formats::BatchGemm& b0 = batch_gemm(*outs.begin()->w);
  if (b0.gemm == nullptr || b0.group_bytes(outs.begin()->w->n_cols) == 0) return nullptr;
  for (const MatmulOut& o : outs) {
    const formats::BatchGemm& b = batch_gemm(*o.w);
    if (b.gemm == nullptr || b.prepare != b0.prepare) return nullptr;
  }
  return &b0;
}

}  // namespace

void matmul(std::initializer_list<MatmulOut> outs, const float* x, int64_t n_tokens,
            int64_t x_stride, ThreadPool& pool, MatmulScratch& scratch) {
  if (outs.size() == 0 || n_tokens <= 0) return;
  const WeightView& w0 = *outs.begin()->w;
  const formats::DType xt = formats::format_info(w0.type).vec_dot_type;
  bool shared = outs.size() <= kMaxGroup;
  for (const MatmulOut& o : outs) {
    shared = shared && o.w->n_cols == w0.n_cols && formats::format_info(o.w->type).vec_dot_type == xt;
  }
  if (!shared) {
    for (const MatmulOut& o : outs) matmul(*o.w, x, n_tokens, x_stride, o.y, o.y_stride, pool, scratch);
    return;
  }
  const int64_t n_cols = w0.n_cols;
  const formats::BatchGemm* batch = shared_batch_gemm(outs, n_tokens);

  // Convert the activations once: [n_tokens, x_row_bytes] in vec_dot_type, or the batch
  // kernels' groups of tokens.
  const uint8_t* xq;
  size_t x_row_bytes;
  if (batch != nullptr) {
    x_row_bytes = batch->group_bytes(n_cols);
    const int64_t n_groups = (n_tokens + formats::kBatchGroup - 1) / formats::kBatchGroup;
    scratch.quantized.resize(x_row_bytes * n_groups);
    uint8_t* buf = scratch.quantized.data();
    pool.parallel_for(n_groups, 1, [&](int64_t g0, int64_t g1, int) {
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t t0 = g * formats::kBatchGroup;
        batch->prepare(x + t0 * x_stride, x_stride, n_cols,
                       std::min(formats::kBatchGroup, n_tokens - t0), buf + g * x_row_bytes);
      }
    });
    xq = buf;
  } else if (xt == formats::DType::F32 && x_stride == n_cols) {
    x_row_bytes = formats::row_bytes(xt, n_cols);
    xq = reinterpret_cast<const uint8_t*>(x);
  } else {
    x_row_bytes = formats::row_bytes(xt, n_cols);
    const auto& xk = formats::kernels(xt);
    scratch.quantized.resize(x_row_bytes * n_tokens);
    uint8_t* buf = scratch.quantized.data();
    auto convert = [&](int64_t t0, int64_t t1, int) {
      for (int64_t t = t0; t < t1; ++t) xk.quantize_row(x + t * x_stride, buf + t * x_row_bytes, n_cols);
    };
    if (n_tokens >= pool.size()) {
      pool.parallel_for(n_tokens, 1, convert);
    } else {
      convert(0, n_tokens, 0);
    }
    xq = buf;
  }

  // Chunks of rows, each within one matrix. One token (decode): kDecodeRowsPerChunk rows, long
  // runs of contiguous weights that the kernels' prefetching streams through (256 rows were
  // faster than 64 in every format: docs/BENCHMARKS.md, "What made it fast"); many
  // tokens: about 8 chunks per thread over all rows, in multiples of 16 rows (the tiles).
  int64_t total_rows = 0;
  for (const MatmulOut& o : outs) total_rows += o.w->n_rows;
  const int64_t per_chunk =
      n_tokens == 1 ? kDecodeRowsPerChunk
                    : std::max<int64_t>(16, (total_rows / (8 * pool.size()) + 15) / 16 * 16);
  std::array<Plan, kMaxGroup> plans;
  size_t n_plans = 0;
  int64_t n_chunks = 0;
  for (const MatmulOut& o : outs) {
    const auto& wk = formats::kernels(o.w->type);
    const bool repacked = sums_repacked(wk, *o.w);
    Plan& p = plans[n_plans++];
    p = {o.w, o.y, o.y_stride,
         batch != nullptr ? batch_gemm(*o.w).gemm : repacked ? wk.gemm_repacked : wk.gemm,
         repacked ? wk.vec_dot_repacked : wk.vec_dot, n_chunks, per_chunk};
    n_chunks += (o.w->n_rows + per_chunk - 1) / per_chunk;
  }
  pool.run_chunks(n_chunks, [&](int64_t c, int) {
    size_t i = 0;
    while (i + 1 < n_plans && plans[i + 1].first_chunk <= c) ++i;
    const Plan& p = plans[i];
    const int64_t r0 = (c - p.first_chunk) * p.rows_per_chunk;
    const int64_t r1 = std::min(p.w->n_rows, r0 + p.rows_per_chunk);
    run_rows(p, xq, x_row_bytes, n_tokens, r0, r1);
  });
}

void matmul(const WeightView& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
            int64_t y_stride, ThreadPool& pool, MatmulScratch& scratch) {
  matmul({MatmulOut{&w, y, y_stride}}, x, n_tokens, x_stride, pool, scratch);
}

void matmul_rows(const WeightView& w, const float* x, const int32_t* rows, int64_t n_rows,
                 float* y, ThreadPool& pool, MatmulScratch& scratch) {
  if (n_rows <= 0) return;
  const formats::DType xt = formats::format_info(w.type).vec_dot_type;
  const uint8_t* xq = reinterpret_cast<const uint8_t*>(x);
  if (xt != formats::DType::F32) {
    scratch.quantized.resize(formats::row_bytes(xt, w.n_cols));
    formats::kernels(xt).quantize_row(x, scratch.quantized.data(), w.n_cols);
    xq = scratch.quantized.data();
  }
  // The kernels matmul picks for this matrix, so each row gets the same bits as there.
  const auto& wk = formats::kernels(w.type);
  const bool repacked = sums_repacked(wk, w);
  const formats::GemmFn gemm = repacked ? wk.gemm_repacked : wk.gemm;
  const auto vec_dot = repacked ? wk.vec_dot_repacked : wk.vec_dot;
  // Runs of consecutive rows go through the tiled kernel (its prefetching and shared decoding;
  // a run split between two chunks of the row list is two runs), or the dot product where the
  // format has none: either way what matmul computes for those rows.
  pool.parallel_for(n_rows, 64, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1;) {
      int64_t j = i + 1;
      while (j < i1 && rows[j] == rows[j - 1] + 1) ++j;
      const int64_t r0 = rows[i];
      if (gemm != nullptr) {
        gemm(w.n_cols, w.row(r0), w.row_bytes, j - i, xq, 0, 1, y + r0, 0);
      } else {
        for (int64_t k = i; k < j; ++k) y[rows[k]] = vec_dot(w.n_cols, w.row(rows[k]), xq);
      }
      i = j;
    }
  });
}

void dequantize_row(const WeightView& w, int64_t r, float* dst) {
  formats::kernels(w.type).dequantize_row(w.row(r), dst, w.n_cols);
}

}  // namespace squeeze::ops
