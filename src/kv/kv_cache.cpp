#include "kv/kv_cache.h"

#include <string>

#include "core/error.h"
#include "formats/format.h"

namespace squeeze::kv {

namespace {

// n_layer, after checking every size (before anything is allocated from them).
int64_t checked_sizes(int64_t n_layer, int64_t row, int64_t n_ctx, int64_t n_seq) {
  if (n_layer < 1 || row < 1 || n_ctx < 1 || n_seq < 1) {
    throw UsageError("a KV cache needs layers, a row size, cells and sequences (got " +
                     std::to_string(n_layer) + ", " + std::to_string(row) + ", " +
                     std::to_string(n_ctx) + ", " + std::to_string(n_seq) + ")");
  }
  return n_layer;
}

}  // namespace

KvCache::KvCache(int64_t n_layer, int64_t row, int64_t n_ctx, int64_t n_seq, KvType type)
    : n_layer_(checked_sizes(n_layer, row, n_ctx, n_seq)),
      row_(row),
      n_ctx_(n_ctx),
      n_seq_(n_seq),
      n_cells_(n_ctx * n_seq),
      type_(type),
      k_(static_cast<size_t>(n_layer * n_cells_ * row)),
      v_(static_cast<size_t>(n_layer * n_cells_ * row)),
      cells_(static_cast<size_t>(n_cells_)) {}

void KvCache::store(int64_t il, int64_t cell0, int64_t n, const float* k, const float* v) {
  const auto& f16 = formats::kernels(formats::DType::F16);
  for (int64_t t = 0; t < n; ++t) {
    f16.quantize_row(k + t * row_, k_row(il, cell0 + t), row_);
    f16.quantize_row(v + t * row_, v_row(il, cell0 + t), row_);
  }
}

void KvCache::occupy(int64_t cell0, int64_t n, int32_t pos0, int32_t seq) {
  for (int64_t t = 0; t < n; ++t) cells_[static_cast<size_t>(cell0 + t)] = {pos0 + static_cast<int32_t>(t), seq};
}

void KvCache::free_cells(int64_t first, int64_t last) {
  for (int64_t c = first; c < last; ++c) cells_[static_cast<size_t>(c)] = {};
}

ops::KvView KvCache::view(int64_t il, int64_t seq, int64_t n) const {
  const size_t at = static_cast<size_t>((il * n_cells_ + cell_of(seq, 0)) * row_);
  return {k_.data() + at, v_.data() + at, row_, n};
}

}  // namespace squeeze::kv
