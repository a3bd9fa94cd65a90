#include "kv/block_allocator.h"

#include <cassert>

namespace squeeze::kv {

BlockAllocator::BlockAllocator(int64_t n_blocks)
    : refs_(static_cast<size_t>(n_blocks), 0),
      lru_at_(static_cast<size_t>(n_blocks)),
      published_(static_cast<size_t>(n_blocks), 0),
      hash_(static_cast<size_t>(n_blocks), 0) {
  free_.reserve(static_cast<size_t>(n_blocks));
  // A stack popped from the back: block 0 is handed out first.
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t BlockAllocator::allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    index_.erase(hash_[static_cast<size_t>(b)]);
    published_[static_cast<size_t>(b)] = 0;
  } else {
    return -1;
  }
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockAllocator::retain(int32_t b) {
  int32_t& r = refs_[static_cast<size_t>(b)];
  if (r == 0) {
    assert(published(b));  // only a cached block is taken back without allocate()
    lru_.erase(lru_at_[static_cast<size_t>(b)]);
  }
  ++r;
}

void BlockAllocator::release(int32_t b) {
  int32_t& r = refs_[static_cast<size_t>(b)];
  assert(r > 0);
  if (--r > 0) return;
  if (published(b)) {
    lru_at_[static_cast<size_t>(b)] = lru_.insert(lru_.end(), b);
  } else {
    free_.push_back(b);
  }
}

bool BlockAllocator::publish(int32_t b, uint64_t hash) {
  assert(refs(b) > 0 && !published(b));
  if (!index_.emplace(hash, b).second) return false;
  published_[static_cast<size_t>(b)] = 1;
  hash_[static_cast<size_t>(b)] = hash;
  return true;
}

void BlockAllocator::unpublish(int32_t b) {
  if (!published(b)) return;
  assert(refs(b) > 0);  // an idle cached block is never written
  index_.erase(hash_[static_cast<size_t>(b)]);
  published_[static_cast<size_t>(b)] = 0;
}

int32_t BlockAllocator::find(uint64_t hash) const {
  const auto it = index_.find(hash);
  return it == index_.end() ? -1 : it->second;
}

}  // namespace squeeze::kv
