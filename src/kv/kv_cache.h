// The KV cache: for every layer, one row of K and one of V per cell, each cell recording the
// position and sequence it holds. Sequence s owns the n_ctx cells from s * n_ctx, position p in
// cell s * n_ctx + p; the cells' metadata is the base for paged blocks (issue 18), and the
// storage type a parameter for quantized caches (issue 22).
#pragma once

#include <cstdint>
#include <vector>

#include "core/fp16.h"
#include "ops/kv_view.h"

namespace squeeze::kv {

enum class KvType { F16 };

// What a cell holds; pos < 0: free.
struct KvCell {
  int32_t pos = -1;
  int32_t seq = -1;
};

class KvCache {
 public:
  // n_layer layers of n_seq * n_ctx cells, rows of `row` values (n_head_kv * head_dim).
  KvCache(int64_t n_layer, int64_t row, int64_t n_ctx, int64_t n_seq = 1,
          KvType type = KvType::F16);

  int64_t n_layer() const { return n_layer_; }
  int64_t n_cells() const { return n_cells_; }
  int64_t n_ctx() const { return n_ctx_; }  // cells per sequence
  int64_t n_seq() const { return n_seq_; }
  // The cell of sequence seq's position pos.
  int64_t cell_of(int64_t seq, int64_t pos) const { return seq * n_ctx_ + pos; }
  int64_t row() const { return row_; }
  KvType type() const { return type_; }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(f16_t); }

  // Stores n tokens' K and V of layer il ([n, row] floats each, converted to the storage type
  // as llama.cpp converts them) into cells [cell0, cell0 + n).
  void store(int64_t il, int64_t cell0, int64_t n, const float* k, const float* v);
  // Records that cells [cell0, cell0 + n) hold positions pos0.. of sequence seq.
  void occupy(int64_t cell0, int64_t n, int32_t pos0, int32_t seq);
  // Frees cells [first, last).
  void free_cells(int64_t first, int64_t last);
  const KvCell& cell(int64_t i) const { return cells_[static_cast<size_t>(i)]; }

  // Layer il's positions [0, n) of sequence seq, for attention.
  ops::KvView view(int64_t il, int64_t seq, int64_t n) const;

 private:
  f16_t* k_row(int64_t il, int64_t c) { return k_.data() + (il * n_cells_ + c) * row_; }
  f16_t* v_row(int64_t il, int64_t c) { return v_.data() + (il * n_cells_ + c) * row_; }

  int64_t n_layer_, row_, n_ctx_, n_seq_, n_cells_;
  KvType type_;
  std::vector<f16_t> k_;  // [n_layer, n_cells, row]
  std::vector<f16_t> v_;  // [n_layer, n_cells, row]
  std::vector<KvCell> cells_;
};

}  // namespace squeeze::kv
