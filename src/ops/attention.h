// Causal grouped-query attention over one sequence's KV cache.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "ops/kv_view.h"

namespace squeeze::ops {

struct AttentionScratch {
  std::vector<float> per_thread;  // per thread: scores, q, partial sums (attention.cpp)
  std::vector<float> k32, v32;    // a batch's cache rows widened to float
};

struct AttentionShape {
  int n_head = 0;
  int n_head_kv = 0;   // n_head is a multiple of n_head_kv (GQA groups share K/V)
  int head_dim = 0;
  float scale = 0;     // usually 1/sqrt(head_dim)
  // Sliding-window attention: a query at position p sees positions p - window + 1..p (0: all).
  int64_t window = 0;
};

// Head pruning over a batch: its tokens [t0, t1) run only the heads h with keep[h] != 0; the
// other heads' output rows are zero and nothing of them is computed. A call's segments cover
// its tokens in order.
struct HeadSegment {
  int64_t t0 = 0, t1 = 0;
  const uint8_t* keep = nullptr;  // [n_head]
};

// For each token t < n_tokens at position pos0 + t and each head h:
//   out[t, h] = softmax_j(scale * q[t, h] . k[j, h / group]) v[j, h / group],  j <= pos0 + t
//   (and j > pos0 + t - window with a window).
//   q:   [n_tokens, n_head * head_dim]  (rotary already applied)
//   kv:  the sequence's cache, cells 0..pos0+n_tokens-1 filled (kv.n at least that)
//   out: [n_tokens, n_head * head_dim]
// Computed as llama.cpp's CPU back end does with flash attention off, to the bit (pv.h): Q
// rounded to half for Q.K, ggml's softmax, probabilities rounded to half for P.V, sums in its
// order (tinyBLAS for a batch, ggml_vec_dot_f16 for one token).
// With segments (not empty), each segment's tokens run only its kept heads.
void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, int64_t pos0,
               const KvView& kv, float* out, ThreadPool& pool, AttentionScratch& scratch,
               std::span<const HeadSegment> segments = {});

// One token of each of several sequences (a decode step of a batch): query q ([n_head *
// head_dim]) at position pos over its sequence's cache kv (cells 0..pos filled), into out. The
// same sums as attention() with n_tokens = 1 for each, in one parallel pass over every
// (query, head).
struct DecodeQuery {
  const float* q = nullptr;
  int64_t pos = 0;
  KvView kv;
  float* out = nullptr;
  const uint8_t* head_keep = nullptr;  // [n_head] (HeadSegment::keep); null: every head
};
void attention_decode(const AttentionShape& shape, std::span<const DecodeQuery> queries,
                      ThreadPool& pool, AttentionScratch& scratch);

}  // namespace squeeze::ops
