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
#include "core/thread_pool.h"
#include "kv/block_allocator.h"
#include "kv/codebook.h"
#include "kv/key_rope.h"
#include "kv/kv_quant.h"
#include "ops/kv_view.h"

namespace squeeze::kv {

// Tokens per block of a half-float cache.
inline constexpr int64_t kBlockTokens = 16;

// A frozen block of one layer, in place: keys per channel (column c's block codes at k_codes +
// c * k_stride, parameters [row]) or per token (row t's codes at k_codes + t * k_stride,
// parameters [block, row / group]); values per token (row t at v_codes + t * v_stride,
// parameters [block, row / group]); n_out outliers of each (--kv-outliers), sorted by (c, t);
// codes stand for the levels when given (x ~= min + levels[code] * scale).
struct FrozenBlock {
  const uint8_t* k_codes = nullptr;
  const QuantParams* k_params = nullptr;
  const uint8_t* v_codes = nullptr;
  const QuantParams* v_params = nullptr;
  size_t k_stride = 0, v_stride = 0;
  const Outlier* k_out = nullptr;
  const Outlier* v_out = nullptr;
  int64_t n_out = 0;
  // With a codebook (--kv-codebook) the layer's levels of K and V, 16 floats each; else nullptr.
  const float* k_levels = nullptr;
  const float* v_levels = nullptr;
};

// A quantized cache's rows of one layer and sequence, dequantized to half for attention.
struct KvRows {
  std::vector<f16_t> k, v;
  std::vector<int32_t> cells;  // 0, 1, ...
};

class KvCache {
 public:
  // n_layer layers of rows of `row` values (n_head_kv * head_dim), room for n_tokens tokens
  // (rounded up to whole blocks) shared by n_seq sequences 0..n_seq-1, stored as `options`
  // say. Throws UsageError for a size below 1 or bad options (check_kv_options).
  KvCache(int64_t n_layer, int64_t row, int64_t n_tokens, int64_t n_seq = 1,
          const KvOptions& options = {});

  int64_t n_layer() const { return n_layer_; }
  int64_t row() const { return row_; }
  KvType type() const { return opt_.type; }
  const KvOptions& options() const { return opt_; }
  int64_t n_seq() const { return static_cast<int64_t>(seqs_.size()); }
  int64_t n_blocks() const { return blocks_.n_blocks(); }
  int64_t block_tokens() const { return block_; }
  int64_t capacity() const { return n_blocks() * block_; }  // tokens
  // Memory the cache holds now: its fixed storage plus, quantized, the blocks held in half.
  size_t bytes() const;
  // Bytes a token takes in the fixed storage (in codes, quantized).
  size_t bytes_per_token() const;
  // Blocks held in half now (a quantized cache's sinks, recent window and unfinished blocks).
  int64_t n_hot_blocks() const { return n_hot_; }
  const BlockAllocator& blocks() const { return blocks_; }

  // Tokens sequence seq holds in the cache (its cache indices 0..len-1): its positions 0..len-1
  // until an eviction drops some.
  int64_t seq_len(int64_t seq) const { return table(seq).len; }
  // The position seq's next token takes: seq_len plus the tokens evicted from it.
  int64_t seq_pos(int64_t seq) const { return table(seq).len + table(seq).evicted; }
  // The blocks prepare(seq, n) would take: new ones to hold positions up to len + n, plus one
  // when the block position len falls in is shared and must be copied first.
  int64_t blocks_needed(int64_t seq, int64_t n) const;
  // (prepare, commit, cell and cells count in cache indices, which are positions until an
  // eviction.)
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
  // Keeps the tokens of seq at positions below n and releases the blocks past them; its next
  // token takes position n.
  void truncate(int64_t seq, int64_t n);
  // Token eviction (kv/evict.h): seq keeps only the tokens at cache indices `kept` (ascending),
  // moved down to indices 0..kept.size()-1 with their positions; the blocks past them are
  // released and the sequence's blocks leave the prefix index for good. Shared blocks are copied
  // first (Error when no block is free for that). UsageError for a quantized cache.
  void evict(int64_t seq, std::span<const int32_t> kept);
  // dst (emptied first) shares src's positions; a write to a shared block copies it first.
  void fork(int64_t src, int64_t dst);
  // For an empty seq: takes the longest run of indexed full blocks that `tokens` starts with,
  // leaving at least `min_left` (>= 1) tokens to decode (the last one's logits are wanted).
  // Returns the positions taken.
  int64_t reuse_prefix(int64_t seq, std::span<const int32_t> tokens, int64_t min_left = 1);

  // Stores one token's K and V rows of layer il ([row] floats each, converted to the storage
  // type as llama.cpp converts them) into `cell`.
  void store(int64_t il, int32_t cell, const float* k, const float* v);
  // Layer il's rows at `cells` (which must outlive the view), for attention: a half-float
  // cache's own rows (UsageError for a quantized cache).
  ops::KvView view(int64_t il, std::span<const int32_t> cells) const;
  // The same for any cache: a quantized one's rows dequantized into `rows` (the view's storage:
  // it must outlive the view), cells read in parallel on pool.
  ops::KvView read(int64_t il, std::span<const int32_t> cells, KvRows& rows, ThreadPool& pool) const;
  // Whether block b is frozen into codes (a quantized cache's block past its recent window).
  bool frozen(int32_t b) const { return !frozen_.empty() && frozen_[static_cast<size_t>(b)] != 0; }
  // A quantized cache's block b of layer il: its codes when frozen; else its rows in half
  // (K [block, row], V [block, row] after them).
  FrozenBlock frozen_block(int64_t il, int32_t b) const;
  // Keys quantized before RoPE (KvOptions::k_prerope): each layer's rotation, over heads of
  // head_dim values; needed before a block freezes (Error there without it).
  void set_key_rope(std::vector<ops::Rope> per_layer, int64_t head_dim);
  // A codebook (KvOptions::codebook): codes index its levels from the next block frozen on;
  // needed before a block freezes (Error there without it). UsageError for one of other bits or
  // layers.
  void set_codebook(const KvCodebook& cb);
  // Layer il's levels of K (0) or V (1), padded to 16 floats (the kernels' tables); nullptr
  // for uniform codes.
  const float* levels(int64_t il, int kv) const {
    return levels_.empty() ? nullptr : levels_.data() + (il * 2 + kv) * 16;
  }
  // Calibration (squeeze calibrate-kv): fit (which must outlive the cache's freezes, or be
  // unset with nullptr) observes what every block's groups hold as it freezes.
  void set_codebook_fit(CodebookFit* fit) { fit_ = fit; }
  // Columns [c0, c0 + n) of the key frozen block b holds at row t of layer il, in float as
  // attention sees it: codes plus outliers, rotated to the cell's position when quantized
  // before RoPE (c0 and n whole heads then).
  void frozen_key(int64_t il, int32_t b, int64_t t, int64_t c0, int64_t n, float* out) const;
  // Keys before RoPE, a head of frozen block b at once: rows [t0, t1) of tile (dimension d of
  // row t at tile[d * stride + t]) rotated to their cells' positions (KeyRope::rotate_tile).
  void rotate_keys(int64_t il, int32_t b, int64_t t0, int64_t t1, float* tile, int64_t stride) const {
    rope_.rotate_tile(il, tile + t0, stride, pos_.data() + b * block_ + t0, t1 - t0);
  }
  const f16_t* hot_rows(int64_t il, int32_t b) const {
    return hot_[static_cast<size_t>(b)].data() + il * 2 * block_ * row_;
  }
  // What a cell holds: its position and token (-1 before a commit).
  int32_t cell_pos(int32_t cell) const { return pos_[static_cast<size_t>(cell)]; }
  int32_t cell_token(int32_t cell) const { return token_[static_cast<size_t>(cell)]; }

 private:
  struct SeqTable {
    std::vector<int32_t> blocks;   // positions [i * kBlockTokens, (i + 1) * kBlockTokens)
    std::vector<uint64_t> hashes;  // of the full blocks, in order
    int64_t len = 0;
    int64_t evicted = 0;  // tokens dropped by evict(): positions run ahead of cache indices
  };
  const SeqTable& table(int64_t seq) const;
  SeqTable& table(int64_t seq) { return const_cast<SeqTable&>(std::as_const(*this).table(seq)); }
  // One reference less to block b (release_past's step).
  void release(int32_t b);
  // Frees block b's half rows, if it has them.
  void drop_hot(int32_t b);
  // Releases t's blocks past its len.
  void release_past(SeqTable& t);
  // Copies block src's cells (rows of every layer, metadata) into dst.
  void copy_block(int32_t src, int32_t dst);
  size_t at(int64_t il, int64_t cell) const { return static_cast<size_t>((il * capacity() + cell) * row_); }
  // A quantized cache: block b's half rows ([n_layer, 2 (K, V), block, row]), allocated.
  f16_t* hot(int32_t b);
  // Block b's codes of layer il ([qbytes_]: key codes and parameters, then the value's).
  uint8_t* codes(int64_t il, int32_t b) { return q_.data() + (il * n_blocks() + b) * qbytes_; }
  const uint8_t* codes(int64_t il, int32_t b) const { return q_.data() + (il * n_blocks() + b) * qbytes_; }
  // Quantizes block b's half rows into its codes and frees them (freeze), or the reverse (thaw).
  void freeze(int32_t b);
  void thaw(int32_t b);
  // Freezes seq's blocks that left the recent window and hold no sink.
  void freeze_old(const SeqTable& t);
  // Row `t` of block b, layer il, K (0) or V (1), in half into out.
  void dequantize(int64_t il, int32_t b, int64_t t, int kv, f16_t* out) const;
  // What the codes of frozen block f hold at row t, column c of K (0) or V (1), outliers aside.
  float coded(const FrozenBlock& f, int kv, int64_t t, int64_t c) const;

  int64_t n_layer_, row_;
  KvOptions opt_;
  int64_t block_;
  BlockAllocator blocks_;
  std::vector<SeqTable> seqs_;    // [n_seq]
  std::vector<f16_t> k_;          // [n_layer, capacity, row]
  std::vector<f16_t> v_;          // [n_layer, capacity, row]
  std::vector<int32_t> pos_;      // [capacity]
  std::vector<int32_t> token_;    // [capacity]
  std::vector<uint64_t> parent_;  // [n_blocks] hash of the block before an indexed block
  // Quantized: per block its half rows while hot (empty when frozen), whether frozen, the codes.
  std::vector<std::vector<f16_t>> hot_;  // [n_blocks]
  std::vector<uint8_t> frozen_;          // [n_blocks]
  int64_t n_hot_ = 0;
  // A frozen block of one layer: key codes [k_codes_bytes_] and parameters [k_params_], value
  // codes [block, v_stride_] and parameters [v_params_], key and value outliers [n_out_] each,
  // qbytes_ in all.
  size_t k_stride_ = 0, k_codes_bytes_ = 0, v_stride_ = 0;
  size_t k_params_ = 0, v_params_ = 0;  // QuantParams
  int64_t n_out_ = 0;
  KeyRope rope_;  // keys before RoPE: the layers' rotations
  std::vector<float> levels_;    // a codebook's levels: [n_layer, 2, 16]
  CodebookFit* fit_ = nullptr;   // calibration's observer
  size_t qbytes_ = 0;
  std::vector<uint8_t> q_;                     // [n_layer, n_blocks, qbytes_]
};

// Bytes a token takes in the fixed storage of a cache with these options (KvCache::
// bytes_per_token), for n_layer layers of rows of `row` values.
size_t bytes_per_token(const KvOptions& o, int64_t n_layer, int64_t row);
// The capacity in tokens (whole blocks) whose memory stays within `bytes` when n_seq sequences
// run forward steps of up to batch_tokens tokens: the fixed storage, and for a quantized cache
// the blocks held in half set aside first (per sequence its recent window, sinks and unfinished
// block; per step the blocks its new tokens fill before they freeze). 0 when nothing fits.
int64_t tokens_for_memory(const KvOptions& o, int64_t n_layer, int64_t row, size_t bytes,
                          int64_t n_seq, int64_t batch_tokens);

// The prefix cache's key of a full block: a hash of the previous block's key (0 for the first)
// and the block's token ids.
uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens);

}  // namespace squeeze::kv
