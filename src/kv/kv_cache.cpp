#include "kv/kv_cache.h"

#include <algorithm>
#include <cassert>
#include <numeric>
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

// Tokens per block, after checking the options.
int64_t checked_block(const KvOptions& o, int64_t row) {
  check_kv_options(o, row);
  return block_tokens(o);
}

int64_t blocks_for(int64_t n_tokens, int64_t block) { return (n_tokens + block - 1) / block; }

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

KvCache::KvCache(int64_t n_layer, int64_t row, int64_t n_tokens, int64_t n_seq,
                 const KvOptions& options)
    : n_layer_(checked_sizes(n_layer, row, n_tokens, n_seq)),
      row_(row),
      opt_(options),
      block_(checked_block(options, row)),
      blocks_(blocks_for(n_tokens, block_)),
      seqs_(static_cast<size_t>(n_seq)),
      pos_(static_cast<size_t>(capacity()), -1),
      token_(static_cast<size_t>(capacity()), -1),
      parent_(static_cast<size_t>(n_blocks()), 0) {
  if (!opt_.quantized()) {
    k_.resize(static_cast<size_t>(n_layer * capacity() * row));
    v_.resize(k_.size());
    return;
  }
  const int bits = kv_bits(opt_.type);
  const bool channel = opt_.k_axis == KeyAxis::Channel;
  k_stride_ = channel ? packed_bytes(block_, bits) : packed_bytes(row_, bits);
  k_codes_bytes_ = k_stride_ * static_cast<size_t>(channel ? row_ : block_);
  v_stride_ = packed_bytes(row_, bits);
  k_params_ = static_cast<size_t>(channel ? row_ : block_ * (row_ / opt_.group));
  v_params_ = static_cast<size_t>(block_ * (row_ / opt_.group));
  n_out_ = outlier_count(opt_, block_, row_);
  qbytes_ = k_codes_bytes_ + static_cast<size_t>(block_) * v_stride_ +
            (k_params_ + v_params_) * sizeof(QuantParams) + static_cast<size_t>(2 * n_out_) * sizeof(Outlier);
  q_.resize(static_cast<size_t>(n_layer_ * n_blocks()) * qbytes_);
  hot_.resize(static_cast<size_t>(n_blocks()));
  frozen_.assign(static_cast<size_t>(n_blocks()), 0);
}

size_t KvCache::bytes() const {
  const size_t hot = static_cast<size_t>(n_hot_ * n_layer_ * 2 * block_ * row_) * sizeof(f16_t);
  return (k_.size() + v_.size()) * sizeof(f16_t) + q_.size() + hot + rope_.bytes();
}

size_t KvCache::bytes_per_token() const {
  if (!opt_.quantized()) return static_cast<size_t>(2 * n_layer_ * row_) * sizeof(f16_t);
  return static_cast<size_t>(n_layer_) * qbytes_ / static_cast<size_t>(block_);
}

size_t bytes_per_token(const KvOptions& o, int64_t n_layer, int64_t row) {
  return KvCache(1, row, block_tokens(o), 1, o).bytes_per_token() * static_cast<size_t>(n_layer);
}

int64_t tokens_for_memory(const KvOptions& o, int64_t n_layer, int64_t row, size_t bytes,
                          int64_t n_seq, int64_t batch_tokens) {
  check_kv_options(o, row);
  const int64_t block = block_tokens(o);
  const size_t per_token = bytes_per_token(o, n_layer, row);
  if (o.quantized()) {
    const int64_t per_seq = blocks_for(o.recent, block) + blocks_for(o.sinks, block) + 1;
    const int64_t hot = n_seq * per_seq + blocks_for(batch_tokens, block) + 1;
    const size_t hot_bytes = static_cast<size_t>(hot * block * 2 * n_layer * row) * sizeof(f16_t);
    if (hot_bytes >= bytes) return 0;
    bytes -= hot_bytes;
  }
  return static_cast<int64_t>(bytes / per_token) / block * block;
}

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
  const int64_t fresh = std::max<int64_t>(0, blocks_for(t.len + n, block_) - have);
  const int64_t first = t.len / block_;  // the block position len falls in
  const bool copy = first < have && blocks_.refs(t.blocks[first]) > 1;
  return fresh + (copy ? 1 : 0);
}

bool KvCache::prepare(int64_t seq, int64_t n) {
  if (n <= 0) return true;
  if (blocks_needed(seq, n) > blocks_.n_available()) return false;
  SeqTable& t = table(seq);
  const auto first = static_cast<size_t>(t.len / block_);
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
    if (frozen(b)) thaw(b);  // written again: its kept rows back in half (as the codes hold them)
  }
  while (static_cast<int64_t>(t.blocks.size()) < blocks_for(t.len + n, block_)) {
    const int32_t b = blocks_.allocate();
    assert(b >= 0);
    if (opt_.quantized()) {
      frozen_[static_cast<size_t>(b)] = 0;
      hot(b);
    }
    t.blocks.push_back(b);
  }
  return true;
}

void KvCache::commit(int64_t seq, std::span<const int32_t> tokens) {
  SeqTable& t = table(seq);
  const auto n = static_cast<int64_t>(tokens.size());
  if (blocks_for(t.len + n, block_) > static_cast<int64_t>(t.blocks.size())) {
    throw UsageError("KV cache: commit of " + std::to_string(n) + " tokens past what prepare() made room for");
  }
  for (int64_t i = 0; i < n; ++i) {
    const auto c = static_cast<size_t>(cell(seq, t.len + i));
    pos_[c] = static_cast<int32_t>(t.len + t.evicted + i);
    token_[c] = tokens[static_cast<size_t>(i)];
  }
  t.len += n;
  // After an eviction the blocks no longer hold a prefix of the sequence: none is indexed.
  for (auto i = static_cast<int64_t>(t.hashes.size()); t.evicted == 0 && (i + 1) * block_ <= t.len; ++i) {
    const int32_t b = t.blocks[static_cast<size_t>(i)];
    const uint64_t parent = i == 0 ? 0 : t.hashes.back();
    const std::span<const int32_t> ids(token_.data() + b * block_, block_);
    const uint64_t h = block_hash(parent, ids);
    t.hashes.push_back(h);
    if (!blocks_.published(b) && blocks_.publish(b, h)) parent_[static_cast<size_t>(b)] = parent;
  }
  if (opt_.quantized()) freeze_old(t);
}

void KvCache::freeze_old(const SeqTable& t) {
  // Block i holds positions [i * block, (i + 1) * block): frozen once it holds no sink and the
  // `recent` newest positions are all after it.
  const int64_t first = (opt_.sinks + block_ - 1) / block_;
  for (int64_t i = first; (i + 1) * block_ <= t.len - opt_.recent; ++i) {
    const int32_t b = t.blocks[static_cast<size_t>(i)];
    if (!frozen(b)) freeze(b);
  }
}

void KvCache::drop_hot(int32_t b) {
  std::vector<f16_t>& h = hot_[static_cast<size_t>(b)];
  if (h.empty()) return;
  std::vector<f16_t>().swap(h);
  --n_hot_;
}

void KvCache::release(int32_t b) {
  // A quantized block nobody will reference holds no half rows: freed ones none at all, ones
  // kept for the prefix cache as codes. So the half rows held are those of running sequences
  // (tokens_for_memory sets them aside).
  if (opt_.quantized() && blocks_.refs(b) == 1 && !frozen(b)) {
    if (blocks_.published(b)) {
      freeze(b);
    } else {
      drop_hot(b);
    }
  }
  blocks_.release(b);
}

f16_t* KvCache::hot(int32_t b) {
  std::vector<f16_t>& h = hot_[static_cast<size_t>(b)];
  if (h.empty()) {
    h.resize(static_cast<size_t>(n_layer_ * 2 * block_ * row_));
    ++n_hot_;
  }
  return h.data();
}

void KvCache::freeze(int32_t b) {
  const int bits = kv_bits(opt_.type);
  const f16_t* h = hot(b);
  std::vector<float> rows(static_cast<size_t>(block_ * row_)), original(static_cast<size_t>(n_out_));
  if (opt_.k_prerope) {
    if (rope_.empty()) throw Error("keys quantized before RoPE need the model's rotation (KvCache::set_key_rope)");
    rope_.grow(*std::max_element(pos_.begin() + b * block_, pos_.begin() + (b + 1) * block_));
  }
  if (opt_.codebook && levels_.empty()) throw Error("a KV cache with a codebook needs its levels (KvCache::set_codebook)");
  for (int64_t il = 0; il < n_layer_; ++il) {
    // The block's pieces, writable (frozen_block reads them).
    const FrozenBlock f = frozen_block(il, b);
    auto* k_codes = const_cast<uint8_t*>(f.k_codes);
    auto* k_params = const_cast<QuantParams*>(f.k_params);
    auto* v_codes = const_cast<uint8_t*>(f.v_codes);
    auto* v_params = const_cast<QuantParams*>(f.v_params);
    for (int kv = 0; kv < 2; ++kv) {
      const f16_t* src = h + (il * 2 + kv) * block_ * row_;
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = f16_to_f32(src[i]);
      for (int64_t t = 0; kv == 0 && opt_.k_prerope && t < block_; ++t) {  // each row turned back
        rope_.rotate(il, rows.data() + t * row_, row_, pos_[static_cast<size_t>(b * block_ + t)], true);
      }
      const bool by_column = kv == 0 && opt_.k_axis == KeyAxis::Channel;
      // Outliers: taken out of the quantizer's ranges, kept as what their codes miss. Unused
      // entries (every group down to two) stay (0, 0) with no difference, first in the order.
      auto* out = const_cast<Outlier*>(kv == 0 ? f.k_out : f.v_out);
      const int64_t taken = n_out_ == 0 ? 0
          : take_outliers(rows.data(), block_, row_, opt_.group, by_column, n_out_,
                          out, original.data());
      if (fit_ != nullptr) fit_->observe(il, kv, rows.data(), block_, row_, opt_.group, by_column);
      const float* lv = levels(il, kv);
      if (by_column) {
        quantize_columns(rows.data(), block_, row_, bits, k_codes, k_params, lv);
      } else {
        uint8_t* c = kv == 0 ? k_codes : v_codes;
        QuantParams* p = kv == 0 ? k_params : v_params;
        const size_t row_bytes = kv == 0 ? k_stride_ : v_stride_;
        const int64_t per_row = row_ / opt_.group;
        for (int64_t t = 0; t < block_; ++t) {
          quantize_row_groups(rows.data() + t * row_, row_, opt_.group, bits, c + t * row_bytes,
                              p + t * per_row, lv);
        }
      }
      for (int64_t i = 0; i < taken; ++i) {
        out[i].delta = f32_to_f16(original[static_cast<size_t>(i)] - coded(f, kv, out[i].t, out[i].c));
      }
      if (taken < n_out_) {
        std::move_backward(out, out + taken, out + n_out_);
        std::fill(out, out + (n_out_ - taken), Outlier{});
      }
    }
  }
  drop_hot(b);
  frozen_[static_cast<size_t>(b)] = 1;
}

void KvCache::thaw(int32_t b) {
  f16_t* h = hot(b);
  for (int64_t il = 0; il < n_layer_; ++il) {
    for (int kv = 0; kv < 2; ++kv) {
      for (int64_t t = 0; t < block_; ++t) dequantize(il, b, t, kv, h + ((il * 2 + kv) * block_ + t) * row_);
    }
  }
  frozen_[static_cast<size_t>(b)] = 0;
}

FrozenBlock KvCache::frozen_block(int64_t il, int32_t b) const {
  const uint8_t* q = codes(il, b);
  FrozenBlock f;
  f.k_codes = q;
  f.k_params = reinterpret_cast<const QuantParams*>(q + k_codes_bytes_);
  f.v_codes = q + k_codes_bytes_ + k_params_ * sizeof(QuantParams);
  f.v_params = reinterpret_cast<const QuantParams*>(f.v_codes + static_cast<size_t>(block_) * v_stride_);
  f.k_stride = k_stride_;
  f.v_stride = v_stride_;
  f.k_out = reinterpret_cast<const Outlier*>(reinterpret_cast<const uint8_t*>(f.v_params) + v_params_ * sizeof(QuantParams));
  f.v_out = f.k_out + n_out_;
  f.n_out = n_out_;
  f.k_levels = levels(il, 0);
  f.v_levels = levels(il, 1);
  return f;
}

float KvCache::coded(const FrozenBlock& f, int kv, int64_t t, int64_t c) const {
  const int bits = kv_bits(opt_.type);
  const int64_t at = t * (row_ / opt_.group) + c / opt_.group;  // a per-token group's parameters
  const float* lv = kv == 0 ? f.k_levels : f.v_levels;
  auto value = [&](const QuantParams& p, const uint8_t* codes, int64_t i) {
    return f16_to_f32(p.min) + code_value(codes, i, bits, lv) * f16_to_f32(p.scale);
  };
  if (kv == 1) return value(f.v_params[at], f.v_codes + t * f.v_stride, c);
  if (opt_.k_axis == KeyAxis::Channel) return value(f.k_params[c], f.k_codes + c * f.k_stride, t);
  return value(f.k_params[at], f.k_codes + t * f.k_stride, c);
}

void KvCache::set_key_rope(std::vector<ops::Rope> per_layer, int64_t head_dim) {
  if (static_cast<int64_t>(per_layer.size()) != n_layer_) throw UsageError("set_key_rope: one rotation per layer");
  rope_ = KeyRope(std::move(per_layer), head_dim, row_);
}

void KvCache::set_codebook(const KvCodebook& cb) {
  if (cb.bits != kv_bits(opt_.type) || cb.n_layer != n_layer_) {
    throw UsageError("the KV codebook is for " + std::to_string(cb.n_layer) + " layers of " +
                     std::to_string(cb.bits) + "-bit codes, the cache holds " + std::to_string(n_layer_) +
                     " layers of " + kv_type_name(opt_.type));
  }
  levels_.assign(static_cast<size_t>(n_layer_ * 2 * 16), 0.0f);
  for (int64_t il = 0; il < n_layer_; ++il) {
    for (int kv = 0; kv < 2; ++kv) std::copy_n(cb.at(il, kv), cb.n_levels(), levels_.begin() + (il * 2 + kv) * 16);
  }
}

void KvCache::frozen_key(int64_t il, int32_t b, int64_t t, int64_t c0, int64_t n, float* out) const {
  const FrozenBlock f = frozen_block(il, b);
  for (int64_t c = 0; c < n; ++c) out[c] = coded(f, 0, t, c0 + c);
  for (const Outlier& e : outliers_in_columns(f.k_out, f.n_out, c0, n)) {
    if (e.t == t) out[e.c - c0] += f16_to_f32(e.delta);
  }
  if (opt_.k_prerope) rope_.rotate(il, out, n, pos_[static_cast<size_t>(b * block_ + t)]);
}

void KvCache::dequantize(int64_t il, int32_t b, int64_t t, int kv, f16_t* out) const {
  if (kv == 0 && opt_.k_prerope) {
    std::vector<float> x(static_cast<size_t>(row_));
    frozen_key(il, b, t, 0, row_, x.data());
    for (int64_t c = 0; c < row_; ++c) out[c] = f32_to_f16(x[static_cast<size_t>(c)]);
    return;
  }
  const int bits = kv_bits(opt_.type);
  const FrozenBlock f = frozen_block(il, b);
  const int64_t per_row = row_ / opt_.group;
  const float* lv = kv == 0 ? f.k_levels : f.v_levels;
  if (kv == 1) {
    dequantize_row(f.v_codes + t * f.v_stride, f.v_params + t * per_row, row_, opt_.group, bits, out, lv);
  } else if (opt_.k_axis == KeyAxis::Channel) {
    dequantize_column_row(f.k_codes, f.k_params, block_, row_, bits, t, out, lv);
  } else {
    dequantize_row(f.k_codes + t * f.k_stride, f.k_params + t * per_row, row_, opt_.group, bits, out, lv);
  }
  // The row's outliers: what the codes hold plus what they miss.
  for (const Outlier* e = kv == 0 ? f.k_out : f.v_out, *last = e + f.n_out; e != last; ++e) {
    if (e->t != t || e->delta == 0) continue;
    out[e->c] = f32_to_f16(coded(f, kv, t, e->c) + f16_to_f32(e->delta));
  }
}

int32_t KvCache::cell(int64_t seq, int64_t pos) const {
  const SeqTable& t = table(seq);
  assert(pos >= 0 && pos / block_ < static_cast<int64_t>(t.blocks.size()));
  return static_cast<int32_t>(t.blocks[static_cast<size_t>(pos / block_)] * block_ +
                              pos % block_);
}

void KvCache::cells(int64_t seq, int64_t n, std::vector<int32_t>& out) const {
  const SeqTable& t = table(seq);
  assert(blocks_for(n, block_) <= static_cast<int64_t>(t.blocks.size()));
  out.resize(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) {
    out[static_cast<size_t>(p)] = static_cast<int32_t>(
        t.blocks[static_cast<size_t>(p / block_)] * block_ + p % block_);
  }
}

void KvCache::truncate(int64_t seq, int64_t n) {
  SeqTable& t = table(seq);
  n = std::clamp<int64_t>(n, 0, t.len + t.evicted);
  if (t.evicted == 0) {
    t.len = n;
  } else {  // the tokens held at positions below n
    int64_t len = 0;
    while (len < t.len && pos_[static_cast<size_t>(cell(seq, len))] < n) ++len;
    t.len = len;
    t.evicted = n - len;
  }
  release_past(t);
  t.hashes.resize(std::min(t.hashes.size(), static_cast<size_t>(t.len / block_)));
}

void KvCache::release_past(SeqTable& t) {
  const auto keep = static_cast<size_t>(blocks_for(t.len, block_));
  for (size_t i = keep; i < t.blocks.size(); ++i) release(t.blocks[i]);
  t.blocks.resize(std::min(keep, t.blocks.size()));
}

void KvCache::evict(int64_t seq, std::span<const int32_t> kept) {
  if (opt_.quantized()) throw UsageError("token eviction needs an f16 KV cache (--kv-type f16)");
  SeqTable& t = table(seq);
  const auto n = static_cast<int64_t>(kept.size());
  for (int64_t i = 0; i < n; ++i) {
    if (kept[i] < 0 || kept[i] >= t.len || (i > 0 && kept[i] <= kept[i - 1])) {
      throw UsageError("evict: kept cache indices must ascend within the sequence's tokens");
    }
  }
  int64_t first = 0;  // kept[i] == i below it: nothing moves there
  while (first < n && kept[first] == first) ++first;
  // The blocks written from there on: owned by this sequence, out of the prefix index.
  for (int64_t i = first / block_; i < blocks_for(n, block_); ++i) {
    int32_t& b = t.blocks[static_cast<size_t>(i)];
    if (blocks_.refs(b) > 1) {
      const int32_t own = blocks_.allocate();
      if (own < 0) throw Error("KV cache full: no free block to copy a shared block into before an eviction");
      copy_block(b, own);
      blocks_.release(b);
      b = own;
    } else {
      blocks_.unpublish(b);
    }
  }
  // kept[i] >= i: moving rows down in order reads every row before it is overwritten.
  for (int64_t i = first; i < n; ++i) {
    const auto from = static_cast<size_t>(cell(seq, kept[i]));
    const auto to = static_cast<size_t>(cell(seq, i));
    for (int64_t il = 0; il < n_layer_; ++il) {
      std::copy_n(k_.begin() + at(il, from), row_, k_.begin() + at(il, to));
      std::copy_n(v_.begin() + at(il, from), row_, v_.begin() + at(il, to));
    }
    pos_[to] = pos_[from];
    token_[to] = token_[from];
  }
  t.evicted += t.len - n;
  t.len = n;
  t.hashes.clear();
  release_past(t);
}

void KvCache::fork(int64_t src, int64_t dst) {
  if (src == dst) return;
  truncate(dst, 0);
  const SeqTable& s = table(src);
  SeqTable& d = table(dst);
  d.len = s.len;
  d.evicted = s.evicted;
  d.hashes = s.hashes;
  d.blocks.assign(s.blocks.begin(), s.blocks.begin() + blocks_for(s.len, block_));
  for (const int32_t b : d.blocks) blocks_.retain(b);
}

int64_t KvCache::reuse_prefix(int64_t seq, std::span<const int32_t> tokens, int64_t min_left) {
  SeqTable& t = table(seq);
  if (t.len != 0 || !t.blocks.empty()) throw UsageError("reuse_prefix needs an empty sequence");
  if (min_left < 1) throw UsageError("reuse_prefix leaves at least one token");
  const int64_t max_blocks =
      std::max<int64_t>(static_cast<int64_t>(tokens.size()) - min_left, 0) / block_;
  uint64_t parent = 0;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const auto ids = tokens.subspan(static_cast<size_t>(i * block_), block_);
    const uint64_t h = block_hash(parent, ids);
    const int32_t b = blocks_.find(h);
    // The hash names a candidate; its stored tokens and parent must match too.
    if (b < 0 || parent_[static_cast<size_t>(b)] != parent ||
        !std::equal(ids.begin(), ids.end(), token_.begin() + b * block_)) {
      break;
    }
    blocks_.retain(b);
    t.blocks.push_back(b);
    t.hashes.push_back(h);
    parent = h;
  }
  t.len = static_cast<int64_t>(t.blocks.size()) * block_;
  return t.len;
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  const int64_t c0 = src * block_, d0 = dst * block_;
  if (opt_.quantized() && frozen(src)) {
    for (int64_t il = 0; il < n_layer_; ++il) std::copy_n(codes(il, src), qbytes_, codes(il, dst));
    drop_hot(dst);
    frozen_[static_cast<size_t>(dst)] = 1;
  } else if (opt_.quantized()) {
    const f16_t* from = hot(src);
    std::copy_n(from, n_layer_ * 2 * block_ * row_, hot(dst));
    frozen_[static_cast<size_t>(dst)] = 0;
  }
  for (int64_t il = 0; il < n_layer_ && !opt_.quantized(); ++il) {
    std::copy_n(k_.begin() + at(il, c0), block_ * row_, k_.begin() + at(il, d0));
    std::copy_n(v_.begin() + at(il, c0), block_ * row_, v_.begin() + at(il, d0));
  }
  std::copy_n(pos_.begin() + c0, block_, pos_.begin() + d0);
  std::copy_n(token_.begin() + c0, block_, token_.begin() + d0);
}

void KvCache::store(int64_t il, int32_t cell, const float* k, const float* v) {
  const auto& f16 = formats::kernels(formats::DType::F16);
  if (opt_.quantized()) {
    const int32_t b = cell / static_cast<int32_t>(block_);
    assert(!frozen(b));
    f16_t* h = hot(b) + (il * 2 * block_ + cell % block_) * row_;
    f16.quantize_row(k, h, row_);
    f16.quantize_row(v, h + block_ * row_, row_);
    return;
  }
  f16.quantize_row(k, k_.data() + at(il, cell), row_);
  f16.quantize_row(v, v_.data() + at(il, cell), row_);
}

ops::KvView KvCache::view(int64_t il, std::span<const int32_t> cells) const {
  if (opt_.quantized()) throw UsageError("a quantized KV cache is read through read()");
  return {k_.data() + at(il, 0), v_.data() + at(il, 0), row_, cells};
}

ops::KvView KvCache::read(int64_t il, std::span<const int32_t> cells, KvRows& rows,
                          ThreadPool& pool) const {
  if (!opt_.quantized()) return view(il, cells);
  const auto n = static_cast<int64_t>(cells.size());
  rows.k.resize(static_cast<size_t>(n * row_));
  rows.v.resize(rows.k.size());
  if (static_cast<int64_t>(rows.cells.size()) < n) {
    const auto have = static_cast<int32_t>(rows.cells.size());
    rows.cells.resize(static_cast<size_t>(n));
    std::iota(rows.cells.begin() + have, rows.cells.end(), have);
  }
  pool.parallel_for(n, block_, [&](int64_t j0, int64_t j1, int) {
    for (int64_t j = j0; j < j1; ++j) {
      const int32_t cell = cells[static_cast<size_t>(j)];
      const int32_t b = cell / static_cast<int32_t>(block_);
      const int64_t t = cell % block_;
      f16_t* k = rows.k.data() + j * row_;
      f16_t* v = rows.v.data() + j * row_;
      if (frozen(b)) {
        dequantize(il, b, t, 0, k);
        dequantize(il, b, t, 1, v);
        continue;
      }
      const f16_t* h = hot_rows(il, b) + t * row_;
      std::copy_n(h, row_, k);
      std::copy_n(h + block_ * row_, row_, v);
    }
  });
  return {rows.k.data(), rows.v.data(), row_, std::span(rows.cells).first(static_cast<size_t>(n))};
}

}  // namespace squeeze::kv
