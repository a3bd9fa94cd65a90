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
//            in row tiles: tiles of 128 rows from row 0, then (n_rows % 128 >= 64) one of 64,
//            then (n_rows % 64 == 32) one of 32. A tile of T = 32G rows (G = 4, 2, 1) starting
//            at row t holds its T/2 bytes at byte t/2 of the column: byte 16g + 4i + k
//            (g < G, i < 4, k < 4) has row t + 8G*i + 4g + k in its low nibble and row
//            t + 8G*i + 4G + 4g + k in its high nibble. So when the 16G bytes of 4 inputs are
//            interleaved byte by byte (two unpack steps within each 16-byte lane), 32-bit lane
//            (g, k) of unpack result i holds the 4 inputs' codes of one row, and the lanes of one
//            result's low (high) nibbles are 4G consecutive rows: no un-permuting.
//        W[r, c] = d[r, b] * (q[r, c] - 8),  q in [0, 15].
//   Q4_1 (20 * n_rows bytes a block):
//          d[0..n_rows, b], then m[0..n_rows, b]   2*n_rows bytes each
//          nibbles as Q4_0
//        W[r, c] = d[r, b] * q[r, c] + m[r, b].
//
// F16 and Q8_0 products are float: y[r] = sum_b d[r,b] * acc_b[r], acc_b[r] = sum over the
// active inputs c of block b of x[c] * q[r, c] (F16: y[r] = sum x[c] W[r, c]).
//
// Q4_0 and Q4_1 products are integer, as ggml's dense ones: x is first quantized per block of
// 32 exactly as the dense path quantizes its activations (Q8_1 = Q8_0 plus a sum: scale
// s_b = half(amax/127), xq[c] = round(x[c] / s_b), S_b = half(amax/127 * sum_c xq[c])), once
// per input (SparseInput, shared by all the products of that input); then
//   Q4_0: y[r] = sum_b (d[r,b] * s_b) * float(sum_{active c in b} xq[c] q[r,c] - 8 sx_b)
//   Q4_1: y[r] = sum_b (d[r,b] * s_b) * float(sum_{active c in b} xq[c] q[r,c]) + m[r,b] * S_b
// with sx_b = sum_{active c in b} xq[c] (zeros quantize to 0, so these are the dense block sums)
// and the inner sums exact int32. That is the dense Q4_0 x Q8_0 / Q4_1 x Q8_1 product of the
// zeroed x up to float summation order. A block without active inputs is skipped, scales
// included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
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

// Where the Q4 code of row r (< n_rows, a multiple of 32) sits in an input's n_rows/2 bytes:
// returns the byte, and sets *shift to 0 (low nibble) or 4.
int64_t q4_code_offset(int64_t n_rows, int64_t r, int* shift);

// Re-lays out a row-major matrix. Throws FormatError for a type without a column layout, or
// n_rows not a multiple of 32 (and, for quantized types, n_cols not a multiple of 32).
ColumnWeights to_column_layout(const WeightView& w);

// One token's input, prepared once for every product with it (q, k and v; gate and up): the
// active inputs grouped by block of 32, and (n_cols a multiple of 32) x quantized as the dense
// path does (above). Keeps pointers to x and idx, which must stay valid while it is used.
// Reusable: prepare_sparse_input reuses its buffers.
struct SparseQuad {
  uint8_t j[4];  // 4 active inputs of one block (c = 32b + j); padding repeats the last one
  int32_t xq4;   // their 4 xq as bytes (byte k: j[k]'s), 0 for padding
};
struct SparseInput {
  const float* x = nullptr;
  const int32_t* idx = nullptr;
  int64_t n_active = 0;
  int64_t n_cols = 0;
  bool quantized = false;          // prepared for Q4 (n_cols % 32 == 0): xq, scale, qsum,
                                   // qsum_s and the quads are set
  std::vector<int32_t> blocks;     // the blocks with an active input, ascending
  std::vector<int32_t> block_first;  // [blocks.size() + 1]: their first index into idx
  std::vector<int32_t> block_quad;   // [blocks.size() + 1]: their first quad (Q4)
  std::vector<SparseQuad> quads;
  std::vector<int8_t> xq;          // [n_cols]
  std::vector<float> scale;        // [n_cols / 32] s_b (a half's value)
  std::vector<int32_t> qsum;       // [n_cols / 32] sx_b
  std::vector<float> qsum_s;       // [n_cols / 32] S_b (a half's value)
  std::vector<uint8_t> q8;         // the Q8_1 blocks (work buffer)
};

// Prepares `in` for x[0..n_cols) with active inputs idx[0..n_active) (ascending, distinct, the
// non-zero x: nonzero_indices). for_q4: also quantize x for the integer Q4_0 / Q4_1 products
// (the F16 and Q8_0 ones read x itself, so a product group without Q4 matrices skips it).
void prepare_sparse_input(const float* x, const int32_t* idx, int64_t n_active, int64_t n_cols,
                          SparseInput& in, bool for_q4 = true);
// The same for the columns [c0, c1) of x only (c0 a multiple of 32, c1 too or n_cols): idx
// lists the n_active kept inputs in that range (absolute column numbers), and the products see
// an input that is zero outside it. So threads that own ranges of x prepare and multiply their
// parts independently; their products' sum is the whole input's product.
void prepare_sparse_input_range(const float* x, const int32_t* idx, int64_t n_active,
                                int64_t n_cols, int64_t c0, int64_t c1, SparseInput& in,
                                bool for_q4 = true);

// The grouping step of prepare_sparse_input, in twins that give identical results: the blocks
// with an active input (ascending), their first index into idx and first quad (each array
// gets n_blocks + 1 entries), and, when quads is set, the quads. The caller sizes the arrays:
// blocks / first / quad n_cols / 32 + 2 entries, quads n_active / 4 + n_cols / 32 + 1 +
// kGroupSlack (the AVX2 twin stores 8 quads at a time).
constexpr int64_t kGroupSlack = 8;
struct SparseGroups {
  int32_t* blocks;
  int32_t* first;
  int32_t* quad;
  SparseQuad* quads;  // nullptr: no quads (an input not prepared for Q4)
  int64_t n_blocks;   // set by the twins
  int64_t n_quads;
};
// From idx[0..n_active) (xq: the input's codes, read only for quads).
void group_blocks_scalar(const int32_t* idx, int64_t n_active, const int8_t* xq,
                         SparseGroups& g);
// From the non-zero entries of x (n_cols a multiple of 32), which must be exactly the
// n_active listed ones (the contract of prepare_sparse_input): returns false, having written
// nothing the caller keeps, when their count differs (the caller then uses the scalar twin).
bool group_blocks_avx2(const float* x, int64_t n_cols, int64_t n_active, const int8_t* xq,
                       SparseGroups& g);

// Whether a product with w needs an input prepared for_q4.
inline bool needs_q4_input(const ColumnWeights& w) {
  return w.type == formats::DType::Q4_0 || w.type == formats::DType::Q4_1;
}

// y[r] = sum over the active inputs c of blocks in.blocks[k0..k1) of W[r, c] * x[c], for r in
// [r0, r1), as above.
//   r0, r1: multiples of 128 or n_rows (Q4 row tiles are not cut; F16 / Q8_0 allow any
//   multiple of 32);  y: only y[r0..r1) is written;  scratch: at least r1 - r0 floats.
// Float sums (F16, Q8_0) are per block in index order, so the SIMD twins differ from the scalar
// one only by their fused multiply-adds; the integer ones (Q4_0, Q4_1) equal the scalar one bit
// for bit.
using SparseGemvFn = void (*)(const ColumnWeights& w, const SparseInput& in, int64_t k0,
                              int64_t k1, int64_t r0, int64_t r1, float* y, float* scratch);

void sparse_gemv_scalar(const ColumnWeights& w, const SparseInput& in, int64_t k0, int64_t k1,
                        int64_t r0, int64_t r1, float* y, float* scratch);
void sparse_gemv_avx2(const ColumnWeights& w, const SparseInput& in, int64_t k0, int64_t k1,
                      int64_t r0, int64_t r1, float* y, float* scratch);
void sparse_gemv_avx512(const ColumnWeights& w, const SparseInput& in, int64_t k0, int64_t k1,
                        int64_t r0, int64_t r1, float* y, float* scratch);

// The kernel of an ISA tier (Avx512 and Amx: the AVX-512 one: VNNI for Q4, wider float decoding).
inline SparseGemvFn sparse_gemv_kernel(Isa isa) {
  if (uses_avx512(isa)) return sparse_gemv_avx512;
  return uses_avx2(isa) ? sparse_gemv_avx2 : sparse_gemv_scalar;
}

// The indices of the non-zero x[0..n) (-0.0 counts as zero), ascending, into idx (room for n);
// returns their count. The plain version picks its twin by active_isa().
int64_t nonzero_indices(const float* x, int64_t n, int32_t* idx);
int64_t nonzero_indices_scalar(const float* x, int64_t n, int32_t* idx);
int64_t nonzero_indices_avx2(const float* x, int64_t n, int32_t* idx);

// The weight bytes a product with w over the prepared input reads, for its rows [r0, r1)
// (default: all): per block with an active input its scales (and mins), and per active input
// its codes, both for those rows only.
size_t sparse_bytes_read(const ColumnWeights& w, const SparseInput& in, int64_t r0, int64_t r1);
inline size_t sparse_bytes_read(const ColumnWeights& w, const SparseInput& in) {
  return sparse_bytes_read(w, in, 0, w.n_rows);
}

// Reusable buffers of the threaded drivers.
struct SparseScratch {
  std::vector<float> acc;  // kernel scratch, then partial sums
  SparseInput input;       // the input of the unprepared entry
};

// One product of a group: y[0..w->n_rows) = W x.
struct SparseOut {
  const ColumnWeights* w;
  float* y;
};

// y[0..n_rows) = W x over the prepared input (w.n_cols == in.n_cols, else UsageError), on the
// kernel of active_isa(). The threads split the active blocks, not the rows: each takes a run of
// whole blocks (at least 32 active inputs a thread) and sums it over all rows into its own
// partial y; the partials are added in a fixed order, so the result depends (in its last bits)
// on the number of threads, not on scheduling. (A row split cuts every input's weights into
// short runs, one per thread, and measured up to 2x slower.)
void sparse_gemv(const ColumnWeights& w, const SparseInput& in, float* y, ThreadPool& pool,
                 SparseScratch& scratch);

// Several products of the same input in one parallel region (the runs of blocks of every
// matrix are the work items). Results equal separate sparse_gemv calls bit for bit.
void sparse_gemv(std::initializer_list<SparseOut> outs, const SparseInput& in, ThreadPool& pool,
                 SparseScratch& scratch);

// As above, preparing x and idx[0..n_active) into scratch.input first.
void sparse_gemv(const ColumnWeights& w, const float* x, const int32_t* idx, int64_t n_active,
                 float* y, ThreadPool& pool, SparseScratch& scratch);

}  // namespace squeeze::ops
