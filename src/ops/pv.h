// Internal: the two sums of attention, in the orders llama.cpp's CPU back end uses.
//
// llama.cpp (flash attention off) computes Q.K and P.V as matrix products of half floats. For
// one token (decode) each output is a ggml_vec_dot_f16: 32 partial sums (element i goes to
// partial i % 32, fused multiply-add) folded by pairs and two horizontal adds. For a batch
// (prefill) each output comes from tinyBLAS: 8 partial sums (i % 8) folded as a movehl
// reduction. The next layer re-rounds activations to 8 bits, so the order decides whether the
// logits equal llama.cpp's to the bit or only to ~1% (see formats/lanes.h).
#pragma once

#include <cstdint>

#include "core/cpu.h"
#include "core/fp16.h"

namespace squeeze::ops {

enum class SumOrder {
  VecDotF16,  // 32 partials (ggml_vec_dot_f16), llama.cpp's order for one token
  TinyBlas,   // 8 partials (llamafile tinyBLAS), llama.cpp's order for a batch of tokens
};

inline int n_partials(SumOrder o) { return o == SumOrder::VecDotF16 ? 32 : 8; }

// Folds one output's partial sums (partial[k * stride], k < n_partials(order)).
inline float fold_partials(const float* partial, int64_t stride, SumOrder order) {
  auto at = [&](int k) { return partial[k * stride]; };
  if (order == SumOrder::TinyBlas) {
    const float t0 = at(0) + at(4), t1 = at(1) + at(5), t2 = at(2) + at(6), t3 = at(3) + at(7);
    return (t0 + t2) + (t1 + t3);
  }
  float a[8];
  for (int l = 0; l < 8; ++l) a[l] = (at(l) + at(16 + l)) + (at(8 + l) + at(24 + l));
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = a[l] + a[l + 4];
  return (t[0] + t[1]) + (t[2] + t[3]);
}

// out[d] = sum_j p[j] * v_j[d] for d < head_dim, in `order`.
//   p: [n_kv] (already rounded to half precision, as llama.cpp converts it)
//   v_j: head_dim halves at v + rows[j] * v_stride (rows: the cells of a paged cache)
//   partial: scratch of 32 * head_dim floats
using PvFn = void (*)(const float* p, const f16_t* v, int64_t v_stride, const int32_t* rows,
                      int64_t n_kv, int head_dim, SumOrder order, float* partial, float* out);

void pv_scalar(const float* p, const f16_t* v, int64_t v_stride, const int32_t* rows,
               int64_t n_kv, int head_dim, SumOrder order, float* partial, float* out);
void pv_avx2(const float* p, const f16_t* v, int64_t v_stride, const int32_t* rows, int64_t n_kv,
             int head_dim, SumOrder order, float* partial, float* out);


// a . b over n halves (n a multiple of 8) in `order`. For VecDotF16 a tail past the last
// multiple of 32 is added in double, as ggml_vec_dot_f16 does.
float dot_f16_ordered(const f16_t* a, const f16_t* b, int n, SumOrder order);
float dot_f16_ordered_avx2(const f16_t* a, const f16_t* b, int n, SumOrder order);

// Decode's Q.K for one query head: scores[j] = scale * dot_f16_ordered(k_j, q, head_dim,
// VecDotF16) for j < n_kv, k_j at k + rows[j] * k_stride. One call per head instead of one per
// cache row, so the query is widened once and each row's 32 partial sums fold in registers.
void qk_f16_vecdot(const f16_t* q, const f16_t* k, int64_t k_stride, const int32_t* rows,
                   int64_t n_kv, int head_dim, float scale, float* scores);
void qk_f16_vecdot_avx2(const f16_t* q, const f16_t* k, int64_t k_stride, const int32_t* rows,
                        int64_t n_kv, int head_dim, float scale, float* scores);

// In-place softmax of x[0..n) as ggml's soft_max on x86: exp by expf_ggml, sums of groups of
// 8 (a movehl reduction, the last group padded with zeros) accumulated in double, then a
// multiply by the float of 1/sum.
void softmax_ggml(float* x, int64_t n);
void softmax_ggml_avx2(float* x, int64_t n);

// out[i] = silu_ggml(gate[i]) * up[i]
void swiglu_ggml(const float* gate, const float* up, int64_t n, float* out);
void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out);

// Batch (tinyBLAS order) versions on K and V already widened to float (exactly: every half is
// a float), so a batch converts the cache once per layer instead of once per query and head,
// and each K / V row is read once for the n_q <= kQkMaxHeads query heads of a GQA group:
//   qk: scores[h * scores_stride + j] = scale * (q_h . k_j) for j < n_kv, h < n_q, with q_h at
//       q + h * head_dim and k_j at k + j * k_stride; equal to
//       scale * dot_f16_ordered(k_j, q_h, TinyBlas);
//   pv: out[h * head_dim + d] = sum_j p[h * p_stride + j] * v_j[d] in TinyBlas order, equal to
//       pv(..., TinyBlas, ...) per head.
// head_dim a multiple of 8 and at most kPvF32MaxDim.
inline constexpr int kPvF32MaxDim = 256;
inline constexpr int kQkMaxHeads = 4;
void qk_f32_tinyblas_avx2(const float* q, int n_q, const float* k, int64_t k_stride,
                          int64_t n_kv, int head_dim, float scale, float* scores,
                          int64_t scores_stride);
void pv_f32_tinyblas_avx2(const float* p, int64_t p_stride, int n_q, const float* v,
                          int64_t v_stride, int64_t n_kv, int head_dim, float* out);
// AVX-512 twins (attention_avx512.cpp), on K and V laid out for them (AttentionKernels::
// kv_blocked): qk reads the keys in blocks of 16 transposed, k_j[d] at
// k[(j / 16) * k_stride + d * 16 + j % 16] (widen_key_blocks' layout; the lanes past n_kv of
// the last block are read, never stored); pv reads the values by partials, row j = 8 i + r at
// v + (r * v_stride + i) * head_dim. softmax_ggml_avx512 equals softmax_ggml.
void qk_f32_tinyblas_avx512(const float* q, int n_q, const float* k, int64_t k_stride,
                            int64_t n_kv, int head_dim, float scale, float* scores,
                            int64_t scores_stride);
void pv_f32_tinyblas_avx512(const float* p, int64_t p_stride, int n_q, const float* v,
                            int64_t v_stride, int64_t n_kv, int head_dim, float* out);
// qk_f32_tinyblas_avx512 for n_tok tokens at once (q: [n_tok][n_q][head_dim]; token t sees keys
// [0, n_kv[t]); scores: [n_tok][n_q][scores_stride]), each key block used by every token in
// turn: the same values as one call per token.
void qk_tokens_avx512(const float* q, int n_tok, int n_q, const int64_t* n_kv, const float* kt,
                      int64_t k_stride, int head_dim, float scale, float* scores,
                      int64_t scores_stride);
void softmax_ggml_avx512(float* x, int64_t n);

// The attention and activation kernels of one ISA.
struct AttentionKernels {
  PvFn pv;
  float (*dot_f16)(const f16_t* a, const f16_t* b, int n, SumOrder order);
  void (*qk_f16)(const f16_t* q, const f16_t* k, int64_t k_stride, const int32_t* rows,
                 int64_t n_kv, int head_dim, float scale, float* scores);
  void (*softmax)(float* x, int64_t n);
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* out);
  // Null where the ISA has none (then the f16 kernels above serve batches too).
  void (*qk_f32)(const float* q, int n_q, const float* k, int64_t k_stride, int64_t n_kv,
                 int head_dim, float scale, float* scores, int64_t scores_stride) = nullptr;
  void (*pv_f32)(const float* p, int64_t p_stride, int n_q, const float* v, int64_t v_stride,
                 int64_t n_kv, int head_dim, float* out) = nullptr;
  // qk_f32 and pv_f32 take K and V in the layouts of qk_f32_tinyblas_avx512 and
  // pv_f32_tinyblas_avx512.
  bool kv_blocked = false;
  // Several tokens' qk_f32 at once (qk_tokens_avx512), where the ISA has it.
  void (*qk_tokens)(const float* q, int n_tok, int n_q, const int64_t* n_kv, const float* k,
                    int64_t k_stride, int head_dim, float scale, float* scores,
                    int64_t scores_stride) = nullptr;
};

// Key rows j < n of a cache (row j: width halves at k + rows[j] * stride) widened to float in
// blocks of 16 rows, each transposed: row j's column c at dst[(j / 16) * 16 * width + c * 16 +
// j % 16]; the rows of the last block past n are zero. (j0 a multiple of 16: rows + j0 go to
// dst + j0 * width.)
void widen_key_blocks(const f16_t* k, int64_t stride, const int32_t* rows, int64_t n,
                      int64_t width, float* dst);

inline AttentionKernels attention_kernels(Isa isa) {
  if (uses_avx512(isa)) {
    return {pv_avx2, dot_f16_ordered_avx2, qk_f16_vecdot_avx2, softmax_ggml_avx512, swiglu_avx2,
            qk_f32_tinyblas_avx512, pv_f32_tinyblas_avx512, true, qk_tokens_avx512};
  }
  if (uses_avx2(isa)) {
    return {pv_avx2, dot_f16_ordered_avx2, qk_f16_vecdot_avx2, softmax_ggml_avx2, swiglu_avx2,
            qk_f32_tinyblas_avx2, pv_f32_tinyblas_avx2};
  }
  return {pv_scalar, dot_f16_ordered, qk_f16_vecdot, softmax_ggml, swiglu_ggml};
}

}  // namespace squeeze::ops
