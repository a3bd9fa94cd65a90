// Decode attention over a quantized KV cache, read in place (KIVI's kernels): keys frozen per
// channel are summed as q . k = q . min + (q * scale) . codes, so the codes of a block are
// unpacked once per channel and never dequantized; values frozen per token add p * scale *
// codes, their minima once per group; blocks still in half (sinks, the recent window) are read
// as they are. One twin per ISA (scalar, AVX2, AVX-512) of the same code: the SIMD ones only
// unpack codes faster and widen the float loops, so every twin computes the same floats.
#pragma once

#include <span>
#include <vector>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "ops/attention.h"

namespace squeeze::kv {

// For each query q (q->kv.cells the cells of its positions 0..pos; q->kv's pointers unused):
//   out[h] = softmax_j(scale * q_h . k_j) v_j over its positions (the window's, with one),
// k_j and v_j as the quantized cache kv holds them in layer il (codes: min + code * scale).
// Heads with head_keep[h] == 0 get zero rows. The softmax is ggml's (ops/pv.h).
void attention_decode(const ops::AttentionShape& shape, const KvCache& kv, int64_t il,
                      std::span<const ops::DecodeQuery> queries, ThreadPool& pool,
                      std::vector<float>& scratch, Isa isa = active_isa());

}  // namespace squeeze::kv
