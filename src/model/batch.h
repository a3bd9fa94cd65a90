// The tokens of one forward pass, as llama.cpp's llama_batch: each with its position, its
// sequence and whether its logits are wanted. Tokens of one sequence come with consecutive
// positions in batch order; sequences may interleave. Every weight matrix is read once for the
// whole batch; attention runs per sequence over that sequence's own cells.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace squeeze::model {

struct Batch {
  std::vector<int32_t> token;
  std::vector<int32_t> pos;
  std::vector<int32_t> seq;
  std::vector<uint8_t> logits;  // 1: the logits of this token are wanted

  void add(int32_t t, int32_t p, int32_t s, bool want_logits) {
    token.push_back(t);
    pos.push_back(p);
    seq.push_back(s);
    logits.push_back(want_logits ? 1 : 0);
  }
  int64_t size() const { return static_cast<int64_t>(token.size()); }
};

// One sequence's tokens within a batch chunk: its rows (ascending, in batch order) and the
// position of the first; its positions are pos0, pos0 + 1, ... in row order.
struct SeqRun {
  int32_t seq = 0;
  int32_t pos0 = 0;
  std::vector<int32_t> rows;
  // The KV cells of the sequence's positions [0, pos0 + rows.size()) (kv::KvCache::cells).
  std::span<const int32_t> cells;
  // rows are first_row, first_row + 1, ... (no other sequence's token between them)
  bool contiguous() const { return rows.back() - rows.front() + 1 == static_cast<int32_t>(rows.size()); }
};

// The layout of a chunk for the forward pass: per token its position, and the sequences' runs.
struct ChunkLayout {
  int64_t n = 0;
  std::span<const int32_t> pos;  // [n]
  std::vector<SeqRun> runs;
};

// One sequence `seq` at positions pos0.. (the single-sequence forward); `pos` holds the n
// positions and `cells` the sequence's cells (SeqRun::cells); both must outlive the layout.
ChunkLayout single_sequence(int64_t n, int32_t pos0, int32_t seq, std::vector<int32_t>& pos,
                            std::span<const int32_t> cells);

}  // namespace squeeze::model
