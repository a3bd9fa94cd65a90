// Matrix-vector products that skip zero inputs (activation sparsity, as in TEAL): y = W x for
// one token whose activations x have many exact zeros.
//
// A GGUF weight matrix is stored row by row (one output per row), so a zero x[c] saves nothing:
// its weights sit in every row. to_column_layout re-lays W out once, at load, by input column,
// so the weights of input c are one contiguous run per block that a zero x[c] skips entirely;
// the product then reads about density x the dense bytes (plus the block scales).
//
// Column-major layouts (in memory only; never written to a file). W is [n_rows outputs,
// n_cols inputs]; n_rows is a multiple of 32, and for the quantized types so is n_cols. Every
// number is the original one (the re-layout is lossless: no value is re-quantized). Block b
// holds inputs c in [32b, 32b + 32); d, m are IEEE halves; "rows" means all n_rows outputs:
//   F16  (1 input per "block"):  input c at c * 2*n_rows bytes: W[0..n_rows, c], halves.
//   Q8_0 (34 * n_rows bytes a block):
//          d[0..n_rows, b]                      2*n_rows bytes
//          for j < 32, input c = 32b + j:  q[0..n_rows, c] as int8    n_rows bytes each
//        W[r, c] = d[r, b] * q[r, c].
//   Q4_0 (18 * n_rows bytes a block):
//          d[0..n_rows, b]                      2*n_rows bytes
//          for j < 32: the nibbles of q[0..n_rows, c]                 n_rows/2 bytes each,
//            16 bytes per group of 32 rows g: byte k (k < 16) holds row 32g + k in its low
//            nibble and row 32g + 16 + k in its high nibble (Q4_0's own in-block order, so
//            SIMD code unpacks with an and and a shift)
//        W[r, c] = d[r, b] * (q[r, c] - 8),  q in [0, 15].
//   Q4_1 (20 * n_rows bytes a block):
//          d[0..n_rows, b], then m[0..n_rows, b]   2*n_rows bytes each
//          nibbles as Q4_0
//        W[r, c] = d[r, b] * q[r, c] + m[r, b].
//
// The products sum per block: y[r] = sum_b d[r,b] * acc_b[r] (+ the offset term), where
// acc_b[r] = sum over the active inputs c of block b of x[c] * q[r, c], and the offset term is
// -8 d[r,b] * sx_b (Q4_0) or m[r,b] * sx_b (Q4_1) with sx_b the sum of the block's active x[c].
// A block without active inputs is skipped, scales included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "ops/tensor.h"

namespace squeeze::ops {

// A weight matrix in one of the column-major layouts above. Plain data on purpose (the SIMD
// units read the fields and call no inline member: see formats/avx2_util.h). Move-only; a
// default-constructed one is empty (n_rows 0, bytes() 0).
struct ColumnWeights {
  formats::DType type = formats::DType::F16;  // F16, Q8_0, Q4_0 or Q4_1
  int64_t n_rows = 0;        // outputs
  int64_t n_cols = 0;        // inputs
  int64_t block_inputs = 0;  // inputs per block: 32 (F16: 1)
  size_t block_bytes = 0;    // bytes per block: header + block_inputs * column_bytes
  size_t header_bytes = 0;   // scales (Q4_1: and mins) at the start of each block
  size_t column_bytes = 0;   // bytes of one input's weights for all rows
  uint8_t* data = nullptr;   // [n_cols / block_inputs blocks], 64-byte aligned, owned
  size_t n_bytes = 0;

  ColumnWeights() = default;
  ~ColumnWeights();
  ColumnWeights(ColumnWeights&& o) noexcept;
  ColumnWeights& operator=(ColumnWeights&& o) noexcept;
  ColumnWeights(const ColumnWeights&) = delete;
  ColumnWeights& operator=(const ColumnWeights&) = delete;

  size_t bytes() const;  // memory it holds
  // W[r, c], decoded from the layout (for tests and checks; not a fast path).
  float weight(int64_t r, int64_t c) const;
};

bool column_layout_supported(formats::DType t);

// Re-lays out a row-major matrix. Throws FormatError for a type without a column layout, or
// n_rows not a multiple of 32 (and, for quantized types, n_cols not a multiple of 32).
ColumnWeights to_column_layout(const WeightView& w);

// y[r] = sum_{i < n_active} W[r, idx[i]] * x[idx[i]]  for r in [r0, r1).
//   idx: ascending, distinct, < n_cols;  r0, r1: multiples of 32 (r1 may equal n_rows);
//   y: only y[r0..r1) is written;  scratch: at least r1 - r0 floats.
// Sums are float, per block in index order, so the SIMD twins differ from the scalar one only by
// their fused multiply-adds.
using SparseGemvFn = void (*)(const ColumnWeights& w, const float* x, const int32_t* idx,
                              int64_t n_active, int64_t r0, int64_t r1, float* y, float* scratch);

void sparse_gemv_scalar(const ColumnWeights& w, const float* x, const int32_t* idx,
                        int64_t n_active, int64_t r0, int64_t r1, float* y, float* scratch);
void sparse_gemv_avx2(const ColumnWeights& w, const float* x, const int32_t* idx,
                      int64_t n_active, int64_t r0, int64_t r1, float* y, float* scratch);
void sparse_gemv_avx512(const ColumnWeights& w, const float* x, const int32_t* idx,
                        int64_t n_active, int64_t r0, int64_t r1, float* y, float* scratch);

// The kernel of an ISA tier (Avx512: the AVX-512 one, which halves the decoding work).
inline SparseGemvFn sparse_gemv_kernel(Isa isa) {
  if (isa == Isa::Avx512) return sparse_gemv_avx512;
  return uses_avx2(isa) ? sparse_gemv_avx2 : sparse_gemv_scalar;
}

// The indices of the non-zero x[0..n) (-0.0 counts as zero), ascending, into idx (room for n);
// returns their count. The plain version picks its twin by active_isa().
int64_t nonzero_indices(const float* x, int64_t n, int32_t* idx);
int64_t nonzero_indices_scalar(const float* x, int64_t n, int32_t* idx);
int64_t nonzero_indices_avx2(const float* x, int64_t n, int32_t* idx);

// Reusable buffers of the threaded driver.
struct SparseScratch {
  std::vector<float> acc;  // [2 * n_chunks - 1, n_rows]: kernel scratch, then partial sums
};

// y[0..n_rows) = W x over the active inputs idx[0..n_active) (as the kernels), on the kernel of
// active_isa(). The threads split the active inputs, each a run of whole blocks (at least 32
// inputs a thread), not the rows: a row split cuts every input's weights into short runs, one
// per thread, and measured up to 2x slower. Each thread sums its inputs over all rows and the
// partial sums are added in a fixed order, so the result depends (in its last bits) on the
// number of threads, not on scheduling.
void sparse_gemv(const ColumnWeights& w, const float* x, const int32_t* idx, int64_t n_active,
                 float* y, ThreadPool& pool, SparseScratch& scratch);

}  // namespace squeeze::ops
