#include "ops/matmul.h"

#include <algorithm>

namespace squeeze::ops {

void matmul(const WeightView& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
            int64_t y_stride, ThreadPool& pool, MatmulScratch& scratch) {
  const auto& info = formats::format_info(w.type);
  const formats::DType xt = info.vec_dot_type;
  const auto& wk = formats::kernels(w.type);
  // Where llama.cpp would repack this matrix, sum in its repacked kernels' order.
  const bool repacked = wk.vec_dot_repacked != nullptr && w.n_rows % formats::kRepackRows == 0;
  const auto vec_dot = repacked ? wk.vec_dot_repacked : wk.vec_dot;
  const formats::GemmFn gemm = repacked ? wk.gemm_repacked : wk.gemm;
  const size_t x_row_bytes = formats::row_bytes(xt, w.n_cols);

  // Convert the activations once: [n_tokens, x_row_bytes].
  const uint8_t* xq;
  if (xt == formats::DType::F32 && x_stride == w.n_cols) {
    xq = reinterpret_cast<const uint8_t*>(x);
  } else {
    const auto& xk = formats::kernels(xt);
    scratch.quantized.resize(x_row_bytes * n_tokens);
    uint8_t* buf = scratch.quantized.data();
    auto convert = [&](int64_t t0, int64_t t1, int) {
      for (int64_t t = t0; t < t1; ++t) xk.quantize_row(x + t * x_stride, buf + t * x_row_bytes, w.n_cols);
    };
    if (n_tokens >= pool.size()) {
      pool.parallel_for(n_tokens, 1, convert);
    } else {
      convert(0, n_tokens, 0);
    }
    xq = buf;
  }

  if (gemm != nullptr) {
    // The tiled kernel takes a block of rows against every token (weights stay in cache while
    // the tokens stream by). For one token, chunks of 64 rows keep the threads balanced.
    const int64_t grain = n_tokens == 1 ? 64 : 16;
    pool.parallel_for(w.n_rows, grain, [&](int64_t r0, int64_t r1, int) {
      gemm(w.n_cols, w.row(r0), w.row_bytes, r1 - r0, xq, x_row_bytes, n_tokens, y + r0,
           y_stride);
    });
    return;
  }
  // Rows are split between threads; within a thread a tile of rows is multiplied by every
  // token before moving on, so the weight tile stays in cache while the tokens stream by.
  constexpr int64_t kRowTile = 16;
  auto body = [&](int64_t r0, int64_t r1, int) {
    for (int64_t rt = r0; rt < r1; rt += kRowTile) {
      const int64_t rt_end = std::min(r1, rt + kRowTile);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const uint8_t* xrow = xq + t * x_row_bytes;
        float* yrow = y + t * y_stride;
        for (int64_t r = rt; r < rt_end; ++r) yrow[r] = vec_dot(w.n_cols, w.row(r), xrow);
      }
    }
  };
  pool.parallel_for(w.n_rows, kRowTile, body);
}

void dequantize_row(const WeightView& w, int64_t r, float* dst) {
  formats::kernels(w.type).dequantize_row(w.row(r), dst, w.n_cols);
}

}  // namespace squeeze::ops
