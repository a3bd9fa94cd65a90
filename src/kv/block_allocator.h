// The blocks of a paged KV cache, as vLLM's block manager keeps them: reference counts, a free
// list, and the prefix cache's index of full blocks by hash. A block nobody references goes
// back to the free list, or, when it is in the index, to a least-recently-released list: it
// still holds its tokens' K and V, so a later request with the same prefix takes it back; an
// allocation evicts the oldest of those only when the free list is empty.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace squeeze::kv {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t n_blocks);

  int64_t n_blocks() const { return static_cast<int64_t>(refs_.size()); }
  // Blocks an allocation can take now: free, or cached and unreferenced.
  int64_t n_available() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  // Blocks referenced by at least one sequence.
  int64_t n_used() const { return n_blocks() - n_available(); }
  // Cached blocks that no sequence references.
  int64_t n_cached_idle() const { return static_cast<int64_t>(lru_.size()); }

  // A block with one reference, or -1 when every block is referenced. Takes a free block, else
  // evicts the least recently released cached one (dropping it from the index).
  int32_t allocate();
  // One more reference (taking a cached block back from the idle list).
  void retain(int32_t b);
  // One reference less; at none the block is free, or idle in the cache when it is indexed.
  void release(int32_t b);
  int32_t refs(int32_t b) const { return refs_[static_cast<size_t>(b)]; }

  // The index of full blocks. Adds b (referenced) under `hash`; returns false and leaves the
  // index as it was when the hash is already there (another block holds the same tokens).
  bool publish(int32_t b, uint64_t hash);
  // Drops b from the index (before it is written again); no-op when it is not there.
  void unpublish(int32_t b);
  bool published(int32_t b) const { return published_[static_cast<size_t>(b)] != 0; }
  // The block indexed under `hash`, or -1 (the caller checks its tokens, then retains it).
  int32_t find(uint64_t hash) const;

 private:
  std::vector<int32_t> refs_;        // [n_blocks]
  std::vector<int32_t> free_;        // unreferenced and not indexed (a stack)
  std::list<int32_t> lru_;           // unreferenced and indexed, oldest release first
  std::vector<std::list<int32_t>::iterator> lru_at_;  // [n_blocks] valid while in lru_
  std::vector<uint8_t> published_;   // [n_blocks]
  std::vector<uint64_t> hash_;       // [n_blocks] valid while published
  std::unordered_map<uint64_t, int32_t> index_;
};

}  // namespace squeeze::kv
