#include "kv/kv_cache.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "core/error.h"
#include "formats/format.h"

namespace squeeze::kv {

namespace {

// n_layer, after checking every size (before anything is allocated from them).
int64_t checked_sizes(int64_t n_layer, int64_t row, int64_t n_tokens, int64_t n_seq) {
  if (n_layer < 1 || row < 1 || n_tokens < 1 || n_seq < 1) {
    throw UsageError("a KV cache needs layers, a row size, tokens and sequences (got " +
                     std::to_string(n_layer) + ", " + std::to_string(row) + ", " +
                     std::to_string(n_tokens) + ", " + std::to_string(n_seq) + ")");
  }
  return n_layer;
}

int64_t blocks_for(int64_t n_tokens) { return (n_tokens + kBlockTokens - 1) / kBlockTokens; }

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent + 0x9e3779b97f4a7c15ULL);
  for (const int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

KvCache::KvCache(int64_t n_layer, int64_t row, int64_t n_tokens, int64_t n_seq, KvType type)
    : n_layer_(checked_sizes(n_layer, row, n_tokens, n_seq)),
      row_(row),
      type_(type),
      blocks_(blocks_for(n_tokens)),
      seqs_(static_cast<size_t>(n_seq)),
      k_(static_cast<size_t>(n_layer * capacity() * row)),
      v_(static_cast<size_t>(n_layer * capacity() * row)),
      pos_(static_cast<size_t>(capacity()), -1),
      token_(static_cast<size_t>(capacity()), -1),
      parent_(static_cast<size_t>(n_blocks()), 0) {}

const KvCache::SeqTable& KvCache::table(int64_t seq) const {
  if (seq < 0 || seq >= n_seq()) {
    throw UsageError("no sequence " + std::to_string(seq) + " in a KV cache of " +
                     std::to_string(n_seq()));
  }
  return seqs_[static_cast<size_t>(seq)];
}

int64_t KvCache::blocks_needed(int64_t seq, int64_t n) const {
  const SeqTable& t = table(seq);
  if (n <= 0) return 0;
  const int64_t have = static_cast<int64_t>(t.blocks.size());
  const int64_t fresh = std::max<int64_t>(0, blocks_for(t.len + n) - have);
  const int64_t first = t.len / kBlockTokens;  // the block position len falls in
  const bool copy = first < have && blocks_.refs(t.blocks[first]) > 1;
  return fresh + (copy ? 1 : 0);
}

bool KvCache::prepare(int64_t seq, int64_t n) {
  if (n <= 0) return true;
  if (blocks_needed(seq, n) > blocks_.n_available()) return false;
  SeqTable& t = table(seq);
  const auto first = static_cast<size_t>(t.len / kBlockTokens);
  if (first < t.blocks.size()) {
    int32_t& b = t.blocks[first];
    if (blocks_.refs(b) > 1) {  // shared: this sequence writes a copy of its own
      const int32_t own = blocks_.allocate();
      copy_block(b, own);
      blocks_.release(b);
      b = own;
    } else {
      blocks_.unpublish(b);  // its tokens are about to change (after a truncate)
    }
  }
  while (static_cast<int64_t>(t.blocks.size()) < blocks_for(t.len + n)) {
    const int32_t b = blocks_.allocate();
    assert(b >= 0);
    t.blocks.push_back(b);
  }
  return true;
}

void KvCache::commit(int64_t seq, std::span<const int32_t> tokens) {
  SeqTable& t = table(seq);
  const auto n = static_cast<int64_t>(tokens.size());
  if (blocks_for(t.len + n) > static_cast<int64_t>(t.blocks.size())) {
    throw UsageError("KV cache: commit of " + std::to_string(n) + " tokens past what prepare() made room for");
  }
  for (int64_t i = 0; i < n; ++i) {
    const auto c = static_cast<size_t>(cell(seq, t.len + i));
    pos_[c] = static_cast<int32_t>(t.len + i);
    token_[c] = tokens[static_cast<size_t>(i)];
  }
  t.len += n;
  for (auto i = static_cast<int64_t>(t.hashes.size()); (i + 1) * kBlockTokens <= t.len; ++i) {
    const int32_t b = t.blocks[static_cast<size_t>(i)];
    const uint64_t parent = i == 0 ? 0 : t.hashes.back();
    const std::span<const int32_t> ids(token_.data() + b * kBlockTokens, kBlockTokens);
    const uint64_t h = block_hash(parent, ids);
    t.hashes.push_back(h);
    if (!blocks_.published(b) && blocks_.publish(b, h)) parent_[static_cast<size_t>(b)] = parent;
  }
}

int32_t KvCache::cell(int64_t seq, int64_t pos) const {
  const SeqTable& t = table(seq);
  assert(pos >= 0 && pos / kBlockTokens < static_cast<int64_t>(t.blocks.size()));
  return static_cast<int32_t>(t.blocks[static_cast<size_t>(pos / kBlockTokens)] * kBlockTokens +
                              pos % kBlockTokens);
}

void KvCache::cells(int64_t seq, int64_t n, std::vector<int32_t>& out) const {
  const SeqTable& t = table(seq);
  assert(blocks_for(n) <= static_cast<int64_t>(t.blocks.size()));
  out.resize(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) {
    out[static_cast<size_t>(p)] = static_cast<int32_t>(
        t.blocks[static_cast<size_t>(p / kBlockTokens)] * kBlockTokens + p % kBlockTokens);
  }
}

void KvCache::truncate(int64_t seq, int64_t n) {
  SeqTable& t = table(seq);
  t.len = std::clamp<int64_t>(n, 0, t.len);
  const auto keep = static_cast<size_t>(blocks_for(t.len));
  for (size_t i = keep; i < t.blocks.size(); ++i) blocks_.release(t.blocks[i]);
  t.blocks.resize(std::min(keep, t.blocks.size()));
  t.hashes.resize(std::min(t.hashes.size(), static_cast<size_t>(t.len / kBlockTokens)));
}

void KvCache::fork(int64_t src, int64_t dst) {
  if (src == dst) return;
  truncate(dst, 0);
  const SeqTable& s = table(src);
  SeqTable& d = table(dst);
  d.len = s.len;
  d.hashes = s.hashes;
  d.blocks.assign(s.blocks.begin(), s.blocks.begin() + blocks_for(s.len));
  for (const int32_t b : d.blocks) blocks_.retain(b);
}

int64_t KvCache::reuse_prefix(int64_t seq, std::span<const int32_t> tokens, int64_t min_left) {
  SeqTable& t = table(seq);
  if (t.len != 0 || !t.blocks.empty()) throw UsageError("reuse_prefix needs an empty sequence");
  if (min_left < 1) throw UsageError("reuse_prefix leaves at least one token");
  const int64_t max_blocks =
      std::max<int64_t>(static_cast<int64_t>(tokens.size()) - min_left, 0) / kBlockTokens;
  uint64_t parent = 0;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const auto ids = tokens.subspan(static_cast<size_t>(i * kBlockTokens), kBlockTokens);
    const uint64_t h = block_hash(parent, ids);
    const int32_t b = blocks_.find(h);
    // The hash names a candidate; its stored tokens and parent must match too.
    if (b < 0 || parent_[static_cast<size_t>(b)] != parent ||
        !std::equal(ids.begin(), ids.end(), token_.begin() + b * kBlockTokens)) {
      break;
    }
    blocks_.retain(b);
    t.blocks.push_back(b);
    t.hashes.push_back(h);
    parent = h;
  }
  t.len = static_cast<int64_t>(t.blocks.size()) * kBlockTokens;
  return t.len;
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  const int64_t c0 = src * kBlockTokens, d0 = dst * kBlockTokens;
  for (int64_t il = 0; il < n_layer_; ++il) {
    std::copy_n(k_.begin() + at(il, c0), kBlockTokens * row_, k_.begin() + at(il, d0));
    std::copy_n(v_.begin() + at(il, c0), kBlockTokens * row_, v_.begin() + at(il, d0));
  }
  std::copy_n(pos_.begin() + c0, kBlockTokens, pos_.begin() + d0);
  std::copy_n(token_.begin() + c0, kBlockTokens, token_.begin() + d0);
}

void KvCache::store(int64_t il, int32_t cell, const float* k, const float* v) {
  const auto& f16 = formats::kernels(formats::DType::F16);
  f16.quantize_row(k, k_.data() + at(il, cell), row_);
  f16.quantize_row(v, v_.data() + at(il, cell), row_);
}

ops::KvView KvCache::view(int64_t il, std::span<const int32_t> cells) const {
  return {k_.data() + at(il, 0), v_.data() + at(il, 0), row_, cells};
}

}  // namespace squeeze::kv
