// Internal: the kernel functions behind the traits table in format.cpp.
//
// scalar_*.cpp are compiled for the baseline ISA; avx2_*.cpp with SQUEEZE_AVX2_FLAGS and are
// only reached through kernels(type, Isa::Avx2). Every kernel takes whole rows (n a multiple
// of the block size) and follows the Kernels signatures of format.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/format.h"

namespace squeeze::formats {

using VecDotFn = float (*)(int64_t n, const void* w, const void* x);

// llama.cpp's product of a repacked Q4_K matrix with a batch (its repack.cpp): the tokens in
// whole groups of 4 go through its gemm kernel's order (grouped), the rest (all of a batch of
// up to 3) through its gemv kernel's (single). So a token's sums depend on where the batch puts
// it, as in llama.cpp.
// Scalar reference: ggml's reference rounding and ggml's integer dot-product math.
namespace scalar {
void dequantize_f32(const void* src, float* dst, int64_t n);
void quantize_f32(const float* src, void* dst, int64_t n);
float vec_dot_f32(int64_t n, const void* w, const void* x);
void dequantize_f16(const void* src, float* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
float vec_dot_f16(int64_t n, const void* w, const void* x);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);
float vec_dot_bf16(int64_t n, const void* w, const void* x);
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
float vec_dot_q4_0(int64_t n, const void* w, const void* x);
float vec_dot_q4_0_repacked(int64_t n, const void* w, const void* x);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
float vec_dot_q4_1(int64_t n, const void* w, const void* x);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
float vec_dot_q5_0(int64_t n, const void* w, const void* x);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
float vec_dot_q5_1(int64_t n, const void* w, const void* x);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
// ggml's quantize_row_q8_0_ref (weights): id = 1 / d, halves rounded away from zero.
void quantize_q8_0_ref(const float* src, void* dst, int64_t n);
float vec_dot_q8_0(int64_t n, const void* w, const void* x);
// Q8_0 in block order (Q4_0's repacked order), the AVX-512 and AMX tiers' vec_dot_repacked of Q8_0.
float vec_dot_q8_0_blocks(int64_t n, const void* w, const void* x);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
float vec_dot_q4_k(int64_t n, const void* w, const void* x);
float vec_dot_q4_k_repacked(int64_t n, const void* w, const void* x);
float vec_dot_q4_k_repacked_pairs(int64_t n, const void* w, const void* x);
void gemm_q4_k_repacked(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
                        size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);
float vec_dot_q4_k_tiled(int64_t n, const void* w, const void* x);
void gemm_q4_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
               size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);
float vec_dot_q6_k(int64_t n, const void* w, const void* x);
float vec_dot_q6_k_tiled(int64_t n, const void* w, const void* x);
void gemm_q6_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
               size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);
// Activation-only formats: no vec_dot.
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void dequantize_q8_k(const void* src, float* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);
// The sq{B}_g{G} formats (scalar_sq.cpp): sets dequantize_row, vec_dot, and quantize_row =
// quantize_row_ref (round to nearest against each group's min and max) of the sq format t.
void sq_kernels(DType t, Kernels& k);
// The packed sparse format SP8_50 (scalar_sparse.cpp, sparse.h): Q8_0 codes from floats with
// the 16 largest |x| of a block kept; vec_dot in vec_dot_q8_0_blocks's order.
void quantize_sp8_50(const float* src, void* dst, int64_t n);
void dequantize_sp8_50(const void* src, float* dst, int64_t n);
float vec_dot_sp8_50(int64_t n, const void* w, const void* x);
}  // namespace scalar

// AVX2 + FMA + F16C. Quantizers exist only for the activation formats (bit-identical to the
// scalar ones); weight quantization is offline and uses the scalar reference.
namespace avx2 {
void dequantize_f16(const void* src, float* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
float vec_dot_f16(int64_t n, const void* w, const void* x);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);
float vec_dot_bf16(int64_t n, const void* w, const void* x);
float vec_dot_f32(int64_t n, const void* w, const void* x);

void dequantize_q4_0(const void* src, float* dst, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
float vec_dot_q4_0(int64_t n, const void* w, const void* x);
float vec_dot_q4_0_repacked(int64_t n, const void* w, const void* x);
float vec_dot_q4_1(int64_t n, const void* w, const void* x);
float vec_dot_q5_0(int64_t n, const void* w, const void* x);
float vec_dot_q5_1(int64_t n, const void* w, const void* x);

void dequantize_q8_0(const void* src, float* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
float vec_dot_q8_0(int64_t n, const void* w, const void* x);
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void dequantize_q8_k(const void* src, float* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);

void dequantize_q4_k(const void* src, float* dst, int64_t n);
float vec_dot_q4_k(int64_t n, const void* w, const void* x);
float vec_dot_q4_k_repacked(int64_t n, const void* w, const void* x);
float vec_dot_q4_k_repacked_pairs(int64_t n, const void* w, const void* x);
void gemm_q4_k_repacked(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
                        size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);
float vec_dot_q4_k_tiled(int64_t n, const void* w, const void* x);
void gemm_q4_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
               size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
float vec_dot_q6_k(int64_t n, const void* w, const void* x);
float vec_dot_q6_k_tiled(int64_t n, const void* w, const void* x);
void gemm_q6_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
               size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

// The sq{B}_g{G} formats (avx2_sq.cpp): sets dequantize_row and vec_dot of the sq format t,
// bit-identical to the scalar ones.
void sq_kernels(DType t, Kernels& k);

// Tiled products (avx2_gemm.cpp), bit-identical to loops of the vec_dot above.
void gemm_q4_0(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys);
void gemm_q4_0_repacked(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                        size_t xs, int64_t n_tokens, float* y, int64_t ys);
void gemm_q4_1(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys);
void gemm_q5_0(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys);
void gemm_q8_0(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys);
// The tiled product of the sq format t (null for another format), bit-identical to loops of its
// vec_dot (avx2_gemm.cpp).
GemmFn sq_gemm(DType t);
// SP8_50 (avx2_sparse.cpp), bit-identical to scalar::vec_dot_sp8_50.
float vec_dot_sp8_50(int64_t n, const void* w, const void* x);
void gemm_sp8_50(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
                 int64_t n_tokens, float* y, int64_t ys);
// Within float rounding of vec_dot_f16 (a different summation order; see avx2_gemm.cpp).
void gemm_f16(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
              int64_t n_tokens, float* y, int64_t ys);
}  // namespace avx2

// AVX-512 F/BW/VL + VNNI (avx512_gemm.cpp): the tiled products, bit-identical to the AVX2 ones
// (F16: within float rounding).
namespace avx512 {
// SP8_50 x Q8_0 on AVX-512 + VBMI2 (avx512_sparse.cpp): scalar::vec_dot_sp8_50, bit for bit,
// 8 rows per step.
void gemm_sp8_50(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
                 int64_t n_tokens, float* y, int64_t ys);
// The tiled product of the sq format t (null for another format), bit-identical to the AVX2 one.
GemmFn sq_gemm(DType t);
// avx2::gemm_q6_k on VNNI, bit-identical (avx512_k.cpp).
void gemm_q6_k(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
               size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);
// avx2::gemm_q4_k_repacked on VNNI, bit-identical (avx512_k.cpp).
void gemm_q4_k_repacked(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
                        size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);
void gemm_q4_0_repacked(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                        size_t xs, int64_t n_tokens, float* y, int64_t ys);
void gemm_q4_1(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys);
void gemm_q5_0(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys);
void gemm_q8_0(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
               int64_t n_tokens, float* y, int64_t ys);
// Q8_0 in block order: loops of scalar::vec_dot_q8_0_blocks, bit for bit (this tier's, and the
// AMX tier's products of fewer than 16 tokens).
void gemm_q8_0_blocks(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                      size_t xs, int64_t n_tokens, float* y, int64_t ys);
// Block order on 16-row panels decoded per call (avx512_panels.cpp): the batches of 16 tokens
// or more of gemm_q4_0_repacked and gemm_q8_0_blocks.
void gemm_q4_0_panels(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                      size_t xs, int64_t n_tokens, float* y, int64_t ys);
void gemm_q8_0_panels(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                      size_t xs, int64_t n_tokens, float* y, int64_t ys);
// F16 batches (16 tokens or more, n a multiple of 16) on float panels: one accumulator per
// output over k in order, 16 rows in its lanes; within float rounding of vec_dot_f16.
void gemm_f16_panels(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                     size_t xs, int64_t n_tokens, float* y, int64_t ys);
// Within float rounding of vec_dot_f16 (16-lane accumulators in prefill tiles).
void gemm_f16(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
              int64_t n_tokens, float* y, int64_t ys);
}  // namespace avx512

// AMX (amx_gemm.cpp: INT8 tiles; amx_f16.cpp: BF16 tiles), for batches of at least 16 tokens;
// fewer go to the AVX-512 kernels. Bit-identical to them where they sum in block order (Q4_0's
// repacked order; Q8_0's block order); F16 within float rounding (each half split exactly into
// two bf16).
namespace amx {
void gemm_q4_0_repacked(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                        size_t xs, int64_t n_tokens, float* y, int64_t ys);
void gemm_q8_0_blocks(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x,
                      size_t xs, int64_t n_tokens, float* y, int64_t ys);
void gemm_f16(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
              int64_t n_tokens, float* y, int64_t ys);
// The BatchGemm of Q4_0 (repacked order) and Q8_0 (block order): groups of 16 tokens' Q8_0
// codes and d_x per block.
size_t q8_0_group_bytes(int64_t n);
void prepare_q8_0_groups(const float* x, int64_t x_stride, int64_t n, int64_t n_tokens, void* group);
void gemm_q4_0_batch(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* groups,
                     size_t group_bytes, int64_t n_tokens, float* y, int64_t ys);
void gemm_q8_0_batch(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* groups,
                     size_t group_bytes, int64_t n_tokens, float* y, int64_t ys);
// F16's BatchGemm (format.h): groups of 16 tokens' bf16 hi then lo halves (0 bytes, not
// usable, for rows that are not a multiple of 32).
size_t f16_group_bytes(int64_t n);
void prepare_f16(const float* x, int64_t x_stride, int64_t n, int64_t n_tokens, void* group);
void gemm_f16_batch(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* groups,
                    size_t group_bytes, int64_t n_tokens, float* y, int64_t ys);
}  // namespace amx

// A buffer of at least `bytes` bytes, 64-byte aligned, owned by the calling thread and reused
// by its next call (format.cpp): the working memory of the kernels compiled for other ISAs,
// which must not instantiate the standard library's templates themselves.
void* scratch_buffer(size_t bytes);

}  // namespace squeeze::formats
