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

// Scatters 32 rows [r0, r0 + 32) of a Q4_0 / Q4_1 matrix (block type B) into the layout.
template <typename B>
void relayout_q4_rows(const WeightView& w, int64_t r0, ColumnWeights& out) {
  const int64_t n_blocks = w.n_cols / kBlock32;
  const size_t half = sizeof(f16_t) * static_cast<size_t>(w.n_rows);
  const size_t group = static_cast<size_t>(r0 / kRowGroup) * 16;  // this group's 16 bytes
  for (int64_t k = 0; k < kRowGroup; ++k) {
    const int64_t r = r0 + k;
    const B* row = reinterpret_cast<const B*>(w.row(r));
    for (int64_t b = 0; b < n_blocks; ++b) {
      uint8_t* blk = out.data + b * out.block_bytes;
      std::memcpy(blk + r * sizeof(f16_t), &row[b].d, sizeof(f16_t));
      if constexpr (std::is_same_v<B, formats::BlockQ4_1>) {
        std::memcpy(blk + half + r * sizeof(f16_t), &row[b].m, sizeof(f16_t));
      }
      for (int j = 0; j < kBlock32; ++j) {
        uint8_t* byte = blk + out.header_bytes + j * out.column_bytes + group + (k % 16);
        const uint8_t q = nibble(row[b].qs, j);
        *byte = static_cast<uint8_t>(k < 16 ? (*byte & 0xF0) | q : (*byte & 0x0F) | (q << 4));
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
  const uint8_t byte = col[(r / kRowGroup) * 16 + r % 16];
  const int q = r % kRowGroup < 16 ? byte & 0xF : byte >> 4;
  if (type == DType::Q4_0) return d * static_cast<float>(q - 8);
  const float m = f16_to_f32(reinterpret_cast<const f16_t*>(blk)[n_rows + r]);
  return d * static_cast<float>(q) + m;  // as dequantize_row_q4_1: one product, one sum
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
    case DType::Q4_0:
      for (int64_t r0 = 0; r0 < w.n_rows; r0 += kRowGroup) {
        relayout_q4_rows<formats::BlockQ4_0>(w, r0, out);
      }
      break;
    default:
      for (int64_t r0 = 0; r0 < w.n_rows; r0 += kRowGroup) {
        relayout_q4_rows<formats::BlockQ4_1>(w, r0, out);
      }
      break;
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

void sparse_gemv(const ColumnWeights& w, const float* x, const int32_t* idx, int64_t n_active,
                 float* y, ThreadPool& pool, SparseScratch& scratch) {
  // The threads split the active inputs, not the rows: each takes a run of whole blocks and sums
  // it over all rows into its own partial y; the partials are added at the end. Cutting the rows
  // instead would cut every input's weights into short runs, one per thread (a 192-row Q4
  // matrix on 2 threads: 48 bytes, so both threads fetched the same cache lines); on 2 threads
  // the input split measured 1-2x faster (Q4_0 and Q8_0, SmolLM2's shapes, density 0.5).
  const SparseGemvFn kernel = sparse_gemv_kernel(active_isa());
  const int64_t rows = w.n_rows;
  const int64_t max_chunks = std::min<int64_t>(pool.size(), kMaxChunks);
  const int64_t n_chunks = std::clamp<int64_t>(n_active / kMinInputsPerChunk, 1, max_chunks);
  // [n_chunks, rows] kernel scratch, then [n_chunks - 1, rows] partial sums.
  scratch.acc.resize(static_cast<size_t>((2 * n_chunks - 1) * rows));
  float* partial = scratch.acc.data() + (n_chunks - 1) * rows;  // chunk c's at c * rows
  if (n_chunks == 1) {
    kernel(w, x, idx, n_active, 0, rows, y, scratch.acc.data());
    return;
  }
  // Chunk c: active inputs [cut[c], cut[c + 1]), about equal counts, cut between blocks.
  int64_t cut[kMaxChunks + 1];
  cut[0] = 0;
  for (int64_t c = 1; c < n_chunks; ++c) {
    int64_t t = std::max(cut[c - 1], c * n_active / n_chunks);
    while (t > 0 && t < n_active && idx[t] / w.block_inputs == idx[t - 1] / w.block_inputs) ++t;
    cut[c] = t;
  }
  cut[n_chunks] = n_active;
  pool.run_chunks(n_chunks, [&](int64_t c, int) {
    float* out = c == 0 ? y : partial + c * rows;
    kernel(w, x, idx + cut[c], cut[c + 1] - cut[c], 0, rows, out, scratch.acc.data() + c * rows);
  });
  for (int64_t c = 1; c < n_chunks; ++c) {
    const float* p = partial + c * rows;
    for (int64_t r = 0; r < rows; ++r) y[r] += p[r];
  }
}

}  // namespace squeeze::ops
