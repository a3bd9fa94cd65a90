// The column-major re-layout (sparse_gemv.h) and the threaded driver of the sparse products.
#include "ops/sparse_gemv.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "core/fp16.h"
#include "formats/blocks.h"
#include "formats/format.h"

namespace squeeze::ops {

namespace {

using formats::DType;
using formats::kBlock32;

constexpr size_t kAlign = 64;  // a cache line: each block's scales start on one
constexpr int64_t kRowGroup = 32;
// The threaded driver gives each thread at least this many active inputs (fewer: one thread
// does all; a chunk's fixed costs are a pass over y and a reduction) and uses at most
// kMaxChunks threads (the partial sums are added by one thread).
constexpr int64_t kMinInputsPerChunk = 32;
constexpr int64_t kMaxChunks = 16;
// A matrix of at least kRowSplitRows outputs (an output head: 49152 rows) is split by rows
// instead: its partial sums would not stay in cache (a 4-input pass over 49152 rows loads and
// stores 192 KiB of sums to add 4 x 48 KiB of weights), and its columns are long enough that a
// slice of kRowSliceRows (a multiple of the Q4 row tile, 128) still reads each kept input's
// weights as one run of 1-2 KiB. At most kMaxSlices slices.
constexpr int64_t kRowSplitRows = 8192;
constexpr int64_t kRowSliceRows = 2048;
// The integer Q4 products split by rows from kQ4RowSplitRows on (SmolLM2's stacked gate/up,
// 3072 rows), in slices of kQ4RowSliceRows: no partial sums to add afterwards (3072 floats,
// half of them written by another core), and 4 slices for 2 threads to balance. Measured
// 2026-12-03 per token, interleaved in one process: q4_0 -1.3% (2 slices), -2.5% (4 slices),
// q4_1 -4..5% (4 slices); 512-row slices no better; q/k/v stacked (960 rows) split by rows
// +2.8%; the float Q8_0 products split by rows at 3072 +12%.
constexpr int64_t kQ4RowSplitRows = 3072;
constexpr int64_t kQ4RowSliceRows = 768;
constexpr int64_t kMaxSlices = 64;

void free_aligned(uint8_t* p) {
  if (p != nullptr) ::operator delete(p, std::align_val_t{kAlign});
}

// Q4_0 / Q4_1 code of element j (< 32) of a block's 16 nibble bytes (ggml's in-block order).
inline uint8_t nibble(const uint8_t* qs, int j) {
  return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
}

// Where input c's weights start.
inline const uint8_t* column_ptr(const ColumnWeights& w, int64_t c) {
  return w.data + (c / w.block_inputs) * w.block_bytes + w.header_bytes +
         (c % w.block_inputs) * w.column_bytes;
}

// Scatters a Q4_0 / Q4_1 matrix (block type B) into the layout.
template <typename B>
void relayout_q4(const WeightView& w, ColumnWeights& out) {
  const int64_t n_blocks = w.n_cols / kBlock32;
  const size_t half = sizeof(f16_t) * static_cast<size_t>(w.n_rows);
  for (int64_t r = 0; r < w.n_rows; ++r) {
    int shift = 0;
    const int64_t pos = q4_code_offset(w.n_rows, r, &shift);
    const B* row = reinterpret_cast<const B*>(w.row(r));
    for (int64_t b = 0; b < n_blocks; ++b) {
      uint8_t* blk = out.data + b * out.block_bytes;
      std::memcpy(blk + r * sizeof(f16_t), &row[b].d, sizeof(f16_t));
      if constexpr (std::is_same_v<B, formats::BlockQ4_1>) {
        std::memcpy(blk + half + r * sizeof(f16_t), &row[b].m, sizeof(f16_t));
      }
      for (int j = 0; j < kBlock32; ++j) {
        uint8_t* byte = blk + out.header_bytes + j * out.column_bytes + pos;
        *byte = static_cast<uint8_t>(*byte | (nibble(row[b].qs, j) << shift));
      }
    }
  }
}

}  // namespace

ColumnWeights::~ColumnWeights() { free_aligned(data); }

ColumnWeights::ColumnWeights(ColumnWeights&& o) noexcept
    : type(o.type), n_rows(o.n_rows), n_cols(o.n_cols), block_inputs(o.block_inputs),
      block_bytes(o.block_bytes), header_bytes(o.header_bytes), column_bytes(o.column_bytes),
      data(o.data), n_bytes(o.n_bytes) {
  o.data = nullptr;
  o.n_bytes = 0;
}

ColumnWeights& ColumnWeights::operator=(ColumnWeights&& o) noexcept {
  if (this != &o) {
    free_aligned(data);
    type = o.type;
    n_rows = o.n_rows;
    n_cols = o.n_cols;
    block_inputs = o.block_inputs;
    block_bytes = o.block_bytes;
    header_bytes = o.header_bytes;
    column_bytes = o.column_bytes;
    data = o.data;
    n_bytes = o.n_bytes;
    o.data = nullptr;
    o.n_bytes = 0;
  }
  return *this;
}

size_t ColumnWeights::bytes() const { return n_bytes; }

float ColumnWeights::weight(int64_t r, int64_t c) const {
  const uint8_t* col = column_ptr(*this, c);
  if (type == DType::F16) return f16_to_f32(reinterpret_cast<const f16_t*>(col)[r]);
  const uint8_t* blk = data + (c / block_inputs) * block_bytes;
  const float d = f16_to_f32(reinterpret_cast<const f16_t*>(blk)[r]);
  if (type == DType::Q8_0) return d * static_cast<float>(static_cast<int8_t>(col[r]));
  int shift = 0;
  // Offset first, then the shift it sets: GCC 12 with -fsanitize=shift reads `shift` before the
  // call when both sit in one expression (despite C++17's left-to-right rule for >>).
  const int64_t at = q4_code_offset(n_rows, r, &shift);
  const int q = (col[at] >> shift) & 0xF;
  if (type == DType::Q4_0) return d * static_cast<float>(q - 8);
  const float m = f16_to_f32(reinterpret_cast<const f16_t*>(blk)[n_rows + r]);
  return d * static_cast<float>(q) + m;  // as dequantize_row_q4_1: one product, one sum
}

int64_t q4_code_offset(int64_t n_rows, int64_t r, int* shift) {
  // The tile of row r: start t, G lanes of 16 bytes.
  const int64_t full = n_rows / 128 * 128;
  int64_t t = 0, g_lanes = 4;
  if (r < full) {
    t = r / 128 * 128;
  } else if (n_rows - full >= 64 && r < full + 64) {
    t = full, g_lanes = 2;
  } else {
    t = n_rows - 32, g_lanes = 1;
  }
  const int64_t local = r - t;
  const int64_t i = local / (8 * g_lanes), within = local % (8 * g_lanes);
  *shift = within < 4 * g_lanes ? 0 : 4;
  const int64_t gk = within % (4 * g_lanes);  // 4g + k
  return t / 2 + 16 * (gk / 4) + 4 * i + gk % 4;
}

bool column_layout_supported(DType t) {
  return t == DType::F16 || t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1;
}

ColumnWeights to_column_layout(const WeightView& w) {
  const std::string name(formats::format_info(w.type).name);
  if (!column_layout_supported(w.type)) {
    throw FormatError("no column layout for format " + name + " (f16, q8_0, q4_0, q4_1 have one)");
  }
  const bool quantized = w.type != DType::F16;
  if (w.n_rows <= 0 || w.n_cols <= 0 || w.n_rows % kRowGroup != 0 ||
      (quantized && w.n_cols % kBlock32 != 0)) {
    throw FormatError("column layout of a " + name + " matrix needs rows (" +
                      std::to_string(w.n_rows) + ") a multiple of 32" +
                      (quantized ? " and columns (" + std::to_string(w.n_cols) + ") too" : ""));
  }
  const size_t rows = static_cast<size_t>(w.n_rows);
  ColumnWeights out;
  out.type = w.type;
  out.n_rows = w.n_rows;
  out.n_cols = w.n_cols;
  switch (w.type) {
    case DType::F16:
      out.block_inputs = 1;
      out.header_bytes = 0;
      out.column_bytes = 2 * rows;
      break;
    case DType::Q8_0:
      out.block_inputs = kBlock32;
      out.header_bytes = 2 * rows;
      out.column_bytes = rows;
      break;
    case DType::Q4_0:
      out.block_inputs = kBlock32;
      out.header_bytes = 2 * rows;
      out.column_bytes = rows / 2;
      break;
    default:  // Q4_1
      out.block_inputs = kBlock32;
      out.header_bytes = 4 * rows;
      out.column_bytes = rows / 2;
      break;
  }
  out.block_bytes = out.header_bytes + static_cast<size_t>(out.block_inputs) * out.column_bytes;
  out.n_bytes = out.block_bytes * static_cast<size_t>(w.n_cols / out.block_inputs);
  const size_t alloc = (out.n_bytes + kAlign - 1) / kAlign * kAlign;
  out.data = static_cast<uint8_t*>(::operator new(alloc, std::align_val_t{kAlign}));
  std::memset(out.data, 0, alloc);

  const int64_t n_blocks = w.n_cols / kBlock32;
  switch (w.type) {
    case DType::F16:
      for (int64_t r = 0; r < w.n_rows; ++r) {
        const f16_t* row = reinterpret_cast<const f16_t*>(w.row(r));
        for (int64_t c = 0; c < w.n_cols; ++c) {
          std::memcpy(out.data + c * out.column_bytes + r * sizeof(f16_t), &row[c], sizeof(f16_t));
        }
      }
      break;
    case DType::Q8_0:
      for (int64_t r = 0; r < w.n_rows; ++r) {
        const auto* row = reinterpret_cast<const formats::BlockQ8_0*>(w.row(r));
        for (int64_t b = 0; b < n_blocks; ++b) {
          uint8_t* blk = out.data + b * out.block_bytes;
          std::memcpy(blk + r * sizeof(f16_t), &row[b].d, sizeof(f16_t));
          for (int j = 0; j < kBlock32; ++j) {
            std::memcpy(blk + out.header_bytes + j * out.column_bytes + r, &row[b].qs[j], 1);
          }
        }
      }
      break;
    case DType::Q4_0: relayout_q4<formats::BlockQ4_0>(w, out); break;
    default: relayout_q4<formats::BlockQ4_1>(w, out); break;
  }
  return out;
}

int64_t nonzero_indices_scalar(const float* x, int64_t n, int32_t* idx) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] != 0.0f) idx[k++] = static_cast<int32_t>(i);
  }
  return k;
}

int64_t nonzero_indices(const float* x, int64_t n, int32_t* idx) {
  return uses_avx2(active_isa()) ? nonzero_indices_avx2(x, n, idx)
                                 : nonzero_indices_scalar(x, n, idx);
}

void prepare_sparse_input(const float* x, const int32_t* idx, int64_t n_active, int64_t n_cols,
                          SparseInput& in, bool for_q4) {
  prepare_sparse_input_range(x, idx, n_active, n_cols, 0, n_cols, in, for_q4);
}

void prepare_sparse_input_range(const float* x, const int32_t* idx, int64_t n_active,
                                int64_t n_cols, int64_t c0, int64_t c1, SparseInput& in,
                                bool for_q4) {
  if (c0 < 0 || c0 % kBlock32 != 0 || c1 < c0 || c1 > n_cols ||
      (c1 % kBlock32 != 0 && c1 != n_cols)) {
    throw UsageError("prepare_sparse_input_range: columns [" + std::to_string(c0) + ", " +
                     std::to_string(c1) + ") of " + std::to_string(n_cols) +
                     " are not whole blocks of 32");
  }
  in.x = x;
  in.idx = idx;
  in.n_active = n_active;
  in.n_cols = n_cols;
  in.quantized = for_q4 && n_cols % kBlock32 == 0;
  const int64_t b0 = c0 / kBlock32;
  if (in.quantized) {
    // The dense path's activations for Q4_1 (Q8_1); its Q8_0 ones (for Q4_0) are the same
    // scales and codes. Blocks outside the range are left as they were: no product reads them.
    const int64_t n_blocks = n_cols / kBlock32, n_range = (c1 - c0) / kBlock32;
    in.q8.resize(static_cast<size_t>(n_range) * sizeof(formats::BlockQ8_1));
    formats::kernels(DType::Q8_1).quantize_row(x + c0, in.q8.data(), c1 - c0);
    const auto* q8 = reinterpret_cast<const formats::BlockQ8_1*>(in.q8.data());
    in.xq.resize(static_cast<size_t>(n_cols));
    in.scale.resize(static_cast<size_t>(n_blocks));
    in.qsum.resize(static_cast<size_t>(n_blocks));
    in.qsum_s.resize(static_cast<size_t>(n_blocks));
    for (int64_t i = 0; i < n_range; ++i) {
      const int64_t b = b0 + i;
      std::memcpy(in.xq.data() + b * kBlock32, q8[i].qs, kBlock32);
      int32_t sum = 0;
      for (int j = 0; j < kBlock32; ++j) sum += q8[i].qs[j];
      in.scale[b] = f16_to_f32(q8[i].d);
      in.qsum[b] = sum;
      in.qsum_s[b] = f16_to_f32(q8[i].s);
    }
  }
  // Sized once to their bounds and written through pointers: this runs for every sparse
  // input of every layer of every token (push_back's checks were a visible share of it). The
  // quads get kGroupSlack spare entries: the AVX2 twin stores 8 at a time.
  const size_t max_blocks = static_cast<size_t>((c1 - c0 + kBlock32 - 1) / kBlock32) + 1;
  in.blocks.resize(max_blocks);
  in.block_first.resize(max_blocks);
  in.block_quad.resize(max_blocks);
  if (in.quantized) in.quads.resize(static_cast<size_t>(n_active / 4) + max_blocks + kGroupSlack);
  SparseGroups g{in.blocks.data(), in.block_first.data(), in.block_quad.data(),
                 in.quantized ? in.quads.data() : nullptr, 0, 0};
  const int8_t* xq = in.quantized ? in.xq.data() : nullptr;
  bool simd = uses_avx2(active_isa()) && (c1 - c0) % kBlock32 == 0 &&
              group_blocks_avx2(x + c0, c1 - c0, n_active, xq != nullptr ? xq + c0 : nullptr, g);
  if (simd) {
    for (int64_t k = 0; k < g.n_blocks; ++k) g.blocks[k] += static_cast<int32_t>(b0);
  } else {
    group_blocks_scalar(idx, n_active, xq, g);
  }
  in.blocks.resize(static_cast<size_t>(g.n_blocks));
  in.block_first.resize(static_cast<size_t>(g.n_blocks + 1));
  in.block_quad.resize(static_cast<size_t>(g.n_blocks + 1));
  in.quads.resize(in.quantized ? static_cast<size_t>(g.n_quads) : 0);
}

void group_blocks_scalar(const int32_t* idx, int64_t n_active, const int8_t* xq,
                         SparseGroups& g) {
  int64_t nb = 0, nq = 0;
  for (int64_t i = 0; i < n_active;) {
    const int32_t b = idx[i] / kBlock32;
    const int32_t end = (b + 1) * kBlock32;
    int64_t i1 = i + 1;
    while (i1 < n_active && idx[i1] < end) ++i1;
    g.blocks[nb] = b;
    g.first[nb] = static_cast<int32_t>(i);
    g.quad[nb] = static_cast<int32_t>(nq);
    ++nb;
    if (g.quads != nullptr) {
      for (int64_t k = i; k < i1; k += 4) {
        SparseQuad& q = g.quads[nq++];
        uint32_t packed = 0;
        for (int l = 0; l < 4; ++l) {
          const int64_t e = std::min(k + l, i1 - 1);
          q.j[l] = static_cast<uint8_t>(idx[e] - b * kBlock32);
          const int8_t v = k + l < i1 ? xq[idx[e]] : 0;
          packed |= static_cast<uint32_t>(static_cast<uint8_t>(v)) << (8 * l);
        }
        q.xq4 = static_cast<int32_t>(packed);
      }
    }
    i = i1;
  }
  g.first[nb] = static_cast<int32_t>(n_active);
  g.quad[nb] = static_cast<int32_t>(nq);
  g.n_blocks = nb;
  g.n_quads = nq;
}

namespace {

// One work item of a driver: blocks [k0, k1) of one product into out, with kernel scratch.
struct Item {
  const ColumnWeights* w;
  int64_t k0, k1;  // active blocks
  int64_t r0, r1;  // rows
  float* out;
  float* scratch;
};

// Splits the active blocks of `in` into about equal runs of active inputs (at least
// kMinInputsPerChunk each), at most max_chunks; cut gets n + 1 entries, returns n.
int64_t split_blocks(const SparseInput& in, int64_t max_chunks, int64_t* cut) {
  const int64_t n_chunks =
      std::clamp<int64_t>(in.n_active / kMinInputsPerChunk, 1, std::max<int64_t>(max_chunks, 1));
  const int64_t n_kb = static_cast<int64_t>(in.blocks.size());
  cut[0] = 0;
  for (int64_t c = 1; c < n_chunks; ++c) {
    const int64_t target = c * in.n_active / n_chunks;
    const auto* first = in.block_first.data();
    int64_t k = std::lower_bound(first, first + n_kb, static_cast<int32_t>(target)) - first;
    cut[c] = std::max(cut[c - 1], k);
  }
  cut[n_chunks] = n_kb;
  return n_chunks;
}

void check_shape(const ColumnWeights& w, const SparseInput& in) {
  if (w.n_cols != in.n_cols || w.data == nullptr) {
    throw UsageError("sparse_gemv: a matrix of " + std::to_string(w.n_cols) +
                     " columns and an input of " + std::to_string(in.n_cols));
  }
  if (needs_q4_input(w) && !in.quantized) {
    throw UsageError("sparse_gemv: input not prepared for a Q4 product");
  }
}

}  // namespace

void sparse_gemv(std::initializer_list<SparseOut> outs, const SparseInput& in, ThreadPool& pool,
                 SparseScratch& scratch) {
  // The threads split the active blocks, not the rows: each item is a run of whole blocks of
  // one matrix, summed over all rows into its own partial y; the partials are added at the end.
  // Cutting the rows instead would cut every input's weights into short runs, one per thread (a
  // 192-row Q4 matrix on 2 threads: 48 bytes, so both threads fetched the same cache lines); on
  // 2 threads the input split measured 1-2x faster (Q4_0 and Q8_0, SmolLM2's shapes, density
  // 0.5). Matrices of kRowSplitRows rows or more (Q4: kQ4RowSplitRows) are split by rows (above).
  constexpr int kMaxOuts = 8;
  constexpr int64_t kMaxItems = std::max(kMaxChunks, kMaxSlices);
  if (outs.size() > kMaxOuts) throw UsageError("sparse_gemv: more than 8 products in a group");
  const SparseGemvFn kernel = sparse_gemv_kernel(active_isa());
  const int64_t max_chunks = std::min<int64_t>(pool.size(), kMaxChunks);
  const int64_t n_kb = static_cast<int64_t>(in.blocks.size());
  int64_t cuts[kMaxOuts][kMaxItems + 1];  // block cuts, or row cuts (row_split)
  int64_t n_chunks[kMaxOuts];
  bool row_split[kMaxOuts];
  size_t floats = 0;
  int64_t n_items = 0;
  int m = 0;
  for (const SparseOut& o : outs) {
    check_shape(*o.w, in);
    const int64_t rows = o.w->n_rows;
    const bool q4 = needs_q4_input(*o.w);
    row_split[m] = rows >= kRowSplitRows || (q4 && rows >= kQ4RowSplitRows);
    if (row_split[m]) {
      const int64_t slice = rows < kRowSplitRows ? kQ4RowSliceRows : kRowSliceRows;
      const int64_t n = std::min((rows + slice - 1) / slice, kMaxSlices);
      const int64_t per = ((rows + n - 1) / n + 127) / 128 * 128;
      n_chunks[m] = 0;
      for (int64_t r = 0; r < rows; r += per) cuts[m][n_chunks[m]++] = r;
      cuts[m][n_chunks[m]] = rows;
      floats += static_cast<size_t>(rows + n_chunks[m] * 128);  // kernel scratch per slice
    } else {
      n_chunks[m] = split_blocks(in, max_chunks, cuts[m]);
      // kernel scratch per chunk, partial sums per chunk but the first
      floats += static_cast<size_t>((2 * n_chunks[m] - 1) * rows);
    }
    n_items += n_chunks[m];
    ++m;
  }
  if (scratch.acc.size() < floats) scratch.acc.resize(floats);
  Item items[kMaxOuts * kMaxItems];
  float* next = scratch.acc.data();
  m = 0;
  int64_t it = 0;
  for (const SparseOut& o : outs) {
    const int64_t rows = o.w->n_rows;
    for (int64_t c = 0; c < n_chunks[m]; ++c) {
      if (row_split[m]) {
        const int64_t r0 = cuts[m][c], r1 = cuts[m][c + 1];
        items[it++] = {o.w, 0, n_kb, r0, r1, o.y, next};
        next += r1 - r0;
        continue;
      }
      float* out = o.y;
      if (c > 0) out = next, next += rows;
      items[it++] = {o.w, cuts[m][c], cuts[m][c + 1], 0, rows, out, next};
      next += rows;
    }
    ++m;
  }
  auto run_item = [&](int64_t i, int) {
    const Item& t = items[i];
    kernel(*t.w, in, t.k0, t.k1, t.r0, t.r1, t.out, t.scratch);
  };
  if (n_items == 1) {
    run_item(0, 0);
  } else {
    pool.run_chunks(n_items, run_item);
  }
  // Add the partial sums, in chunk order.
  it = 0;
  m = 0;
  for (const SparseOut& o : outs) {
    const int64_t rows = o.w->n_rows;
    for (int64_t c = 1; c < n_chunks[m] && !row_split[m]; ++c) {
      const float* p = items[it + c].out;
      for (int64_t r = 0; r < rows; ++r) o.y[r] += p[r];
    }
    it += n_chunks[m];
    ++m;
  }
}

void sparse_gemv(const ColumnWeights& w, const SparseInput& in, float* y, ThreadPool& pool,
                 SparseScratch& scratch) {
  sparse_gemv({SparseOut{&w, y}}, in, pool, scratch);
}

void sparse_gemv(const ColumnWeights& w, const float* x, const int32_t* idx, int64_t n_active,
                 float* y, ThreadPool& pool, SparseScratch& scratch) {
  prepare_sparse_input(x, idx, n_active, w.n_cols, scratch.input, needs_q4_input(w));
  sparse_gemv(w, scratch.input, y, pool, scratch);
}

size_t sparse_bytes_read(const ColumnWeights& w, const SparseInput& in, int64_t r0, int64_t r1) {
  if (w.n_rows == 0) return 0;
  // header_bytes and column_bytes are proportional to n_rows (whole bytes per 32 rows).
  const uint64_t all_rows = in.blocks.size() * w.header_bytes +
                            static_cast<uint64_t>(in.n_active) * w.column_bytes;
  return static_cast<size_t>(all_rows * static_cast<uint64_t>(r1 - r0) /
                             static_cast<uint64_t>(w.n_rows));
}

}  // namespace squeeze::ops
