// The KV cache, paged as vLLM pages it: cells grouped in blocks of kBlockTokens, each sequence a
// table of blocks (its positions in order), blocks shared between sequences by reference count
// (a fork for n > 1, a common prompt prefix) and copied before one of them writes a shared block
// (copy-on-write). Full blocks are indexed by a hash of (previous block's hash, their token ids):
// the prefix cache (block_allocator.h). Every cell records its position and token, the metadata
// eviction policies start from; the storage type is a parameter (f16 now, quantized for issue 22).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/fp16.h"
#include "kv/block_allocator.h"
#include "ops/kv_view.h"

namespace squeeze::kv {

enum class KvType { F16 };

inline constexpr int64_t kBlockTokens = 16;

class KvCache {
 public:
  // n_layer layers of rows of `row` values (n_head_kv * head_dim), room for n_tokens tokens
  // (rounded up to whole blocks) shared by n_seq sequences 0..n_seq-1. Throws UsageError for a
  // size below 1.
  KvCache(int64_t n_layer, int64_t row, int64_t n_tokens, int64_t n_seq = 1,
          KvType type = KvType::F16);

  int64_t n_layer() const { return n_layer_; }
  int64_t row() const { return row_; }
  KvType type() const { return type_; }
  int64_t n_seq() const { return static_cast<int64_t>(seqs_.size()); }
  int64_t n_blocks() const { return blocks_.n_blocks(); }
  int64_t capacity() const { return n_blocks() * kBlockTokens; }  // tokens
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(f16_t); }
  size_t bytes_per_token() const { return 2 * n_layer_ * row_ * sizeof(f16_t); }
  const BlockAllocator& blocks() const { return blocks_; }

  // Positions sequence seq holds (0..len-1).
  int64_t seq_len(int64_t seq) const { return table(seq).len; }
  // The blocks prepare(seq, n) would take: new ones to hold positions up to len + n, plus one
  // when the block position len falls in is shared and must be copied first.
  int64_t blocks_needed(int64_t seq, int64_t n) const;
  // Makes positions [len, len + n) of seq writable: allocates blocks, copies a shared block
  // before it is written, drops a block about to change from the prefix index. Returns false,
  // changing nothing, when fewer than blocks_needed blocks are available.
  bool prepare(int64_t seq, int64_t n);
  // Records that positions [len, len + tokens.size()) hold `tokens` (their rows written by
  // store() after prepare()); blocks that became full enter the prefix index.
  void commit(int64_t seq, std::span<const int32_t> tokens);
  // The cell of seq's position pos (a position prepare() made room for).
  int32_t cell(int64_t seq, int64_t pos) const;
  // The cells of positions [0, n), in order, into out.
  void cells(int64_t seq, int64_t n, std::vector<int32_t>& out) const;
  // Keeps positions [0, n) of seq and releases the blocks past them.
  void truncate(int64_t seq, int64_t n);
  // dst (emptied first) shares src's positions; a write to a shared block copies it first.
  void fork(int64_t src, int64_t dst);
  // For an empty seq: takes the longest run of indexed full blocks that `tokens` starts with,
  // leaving at least `min_left` (>= 1) tokens to decode (the last one's logits are wanted).
  // Returns the positions taken.
  int64_t reuse_prefix(int64_t seq, std::span<const int32_t> tokens, int64_t min_left = 1);

  // Stores one token's K and V rows of layer il ([row] floats each, converted to the storage
  // type as llama.cpp converts them) into `cell`.
  void store(int64_t il, int32_t cell, const float* k, const float* v);
  // Layer il's rows at `cells` (which must outlive the view), for attention.
  ops::KvView view(int64_t il, std::span<const int32_t> cells) const;
  // What a cell holds: its position and token (-1 before a commit).
  int32_t cell_pos(int32_t cell) const { return pos_[static_cast<size_t>(cell)]; }
  int32_t cell_token(int32_t cell) const { return token_[static_cast<size_t>(cell)]; }

 private:
  struct SeqTable {
    std::vector<int32_t> blocks;   // positions [i * kBlockTokens, (i + 1) * kBlockTokens)
    std::vector<uint64_t> hashes;  // of the full blocks, in order
    int64_t len = 0;
  };
  const SeqTable& table(int64_t seq) const;
  SeqTable& table(int64_t seq) { return const_cast<SeqTable&>(std::as_const(*this).table(seq)); }
  // Copies block src's cells (rows of every layer, metadata) into dst.
  void copy_block(int32_t src, int32_t dst);
  size_t at(int64_t il, int64_t cell) const { return static_cast<size_t>((il * capacity() + cell) * row_); }

  int64_t n_layer_, row_;
  KvType type_;
  BlockAllocator blocks_;
  std::vector<SeqTable> seqs_;    // [n_seq]
  std::vector<f16_t> k_;          // [n_layer, capacity, row]
  std::vector<f16_t> v_;          // [n_layer, capacity, row]
  std::vector<int32_t> pos_;      // [capacity]
  std::vector<int32_t> token_;    // [capacity]
  std::vector<uint64_t> parent_;  // [n_blocks] hash of the block before an indexed block
};

// The prefix cache's key of a full block: a hash of the previous block's key (0 for the first)
// and the block's token ids.
uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens);

}  // namespace squeeze::kv
