// Tensor formats: ggml's type ids and block layouts, one traits entry per format.
//
// The ids are ggml's (so a GGUF file written by llama.cpp reads as-is). Formats squeeze adds
// get ids far above ggml's, from 1000 (see docs/FORMATS.md and sq.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/cpu.h"

namespace squeeze::formats {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  // Known to ggml but not supported by squeeze (FormatInfo::supported == false): listed so the
  // GGUF reader can say "unsupported format iq2_xxs" instead of "unknown type id 16".
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  // squeeze's own formats (sq.h): B-bit codes, one half scale and min per group of G elements;
  // id = 1000 + 3 * (B - 2) + log2(G / 32). llama.cpp cannot read them.
  SQ2_G32 = 1000,
  SQ2_G64 = 1001,
  SQ2_G128 = 1002,
  SQ3_G32 = 1003,
  SQ3_G64 = 1004,
  SQ3_G128 = 1005,
  SQ4_G32 = 1006,
  SQ4_G64 = 1007,
  SQ4_G128 = 1008,
  // squeeze's packed sparse 8-bit format (sparse.h): at most 16 of every 32 weights kept, a
  // bitmap saying which, Q8_0's scale and codes. llama.cpp cannot read it.
  SP8_50 = 1100,
};

// Static facts about a format: what a GGUF reader needs to size and validate tensors.
struct FormatInfo {
  DType type;
  std::string_view name;    // ggml's name ("q4_1", "f16", ...) or squeeze's ("sq4_g64")
  int64_t block_size;       // elements per block
  size_t block_bytes;       // bytes per block
  bool supported;           // squeeze can dequantize it and compute dot products with it
  DType vec_dot_type;       // format the activations are converted to for vec_dot
};

// Info for a type id, or nullptr for an id squeeze does not know (the GGUF reader
// turns that into a clear error). Known-but-unsupported formats return supported = false.
// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K, the nine SQ{B}_G{G}
// (weights) and the activation-only formats Q8_1, Q8_K (quantize/dequantize, but no vec_dot of
// their own).
const FormatInfo* format_info(uint32_t type_id);
const FormatInfo& format_info(DType type);
// Parses a format name ("q8_0", "q4_K", "sq3_g64"; case-insensitive); nullptr if unknown.
const FormatInfo* format_by_name(std::string_view name);

// Bytes of a row of n elements. Throws FormatError if n is not a multiple of the block size
// or the type id is unknown.
size_t row_bytes(DType type, int64_t n);

using GemmFn = void (*)(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* x,
                       size_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

// A batched product that reads its activations in a layout of its own (AMX's tiles), made once
// per matrix product and shared by every chunk of rows, in groups of kBatchGroup tokens:
//   group_bytes(n): the size of a group of rows of n elements; 0 where n does not suit the
//     kernel (then Kernels::gemm serves);
//   prepare(x, x_stride, n, n_tokens, group): n_tokens <= kBatchGroup rows of n floats (row
//     stride x_stride floats) into one group of group_bytes(n) bytes, tokens past n_tokens
//     padded; the conversion to vec_dot_type included;
//   gemm(n, w, w_stride, n_rows, groups, group_bytes(n), n_tokens, y, y_stride): the groups
//     back to back; computes what Kernels::gemm (gemm_repacked) computes from the same
//     activations in vec_dot_type rows.
// Used for batches of at least kBatchGroup tokens.
inline constexpr int64_t kBatchGroup = 16;
struct BatchGemm {
  size_t (*group_bytes)(int64_t n) = nullptr;
  void (*prepare)(const float* x, int64_t x_stride, int64_t n, int64_t n_tokens, void* group) = nullptr;
  GemmFn gemm = nullptr;
};

// The kernels of one format on one ISA. All take whole rows: n is a multiple of the block size.
struct Kernels {
  // dst[0..n) = decoded src.
  void (*dequantize_row)(const void* src, float* dst, int64_t n) = nullptr;
  // Encodes n floats into this format (ggml's reference rounding for the activation formats
  // Q8_0 / Q8_1 / Q8_K, so dot products match llama.cpp's).
  void (*quantize_row)(const float* src, void* dst, int64_t n) = nullptr;
  // Dot product of a row in this format with a row in info.vec_dot_type. Null for the
  // activation-only formats Q8_1 and Q8_K.
  float (*vec_dot)(int64_t n, const void* w, const void* x) = nullptr;
  // Encodes n floats the way llama-quantize writes weights: ggml's reference quantizer
  // (quantize_row_*_ref, which ggml_quantize_chunk calls without an importance matrix) or its
  // row conversion for the float formats. Same as quantize_row except for Q8_0, whose run-time
  // activation quantizer rounds halves to even where the reference multiplies by 1 / d and
  // rounds halves away from zero. Scalar on every ISA (weights are quantized offline). Null
  // for the activation-only formats Q8_1 and Q8_K. The sq formats have no ggml counterpart:
  // theirs is plain round-to-nearest against the group's min and max (docs/FORMATS.md).
  void (*quantize_row_ref)(const float* src, void* dst, int64_t n) = nullptr;
  // The dot product in the order of llama.cpp's x86 "repacked" kernels, which it uses instead of
  // vec_dot for matrices of this format whose row count is a multiple of 8 (Q4_0: its
  // gemv/gemm_q4_0_8x8_q8_0 add each block's whole int sum with one fused multiply-add, where
  // vec_dot splits a block into 8 lanes; Q4_K: gemv/gemm_q4_K_8x8_q8_K, one fused multiply-add
  // per super-block, the mins in a second accumulator). Null where llama.cpp does not repack the format,
  // except Q8_0 on the AVX-512 and AMX tiers, which sum in the same block order (own_order below).
  float (*vec_dot_repacked)(int64_t n, const void* w, const void* x) = nullptr;
  // Tiled product of n_rows weight rows (row r at w + r * w_stride bytes) with n_tokens
  // activation rows (token t at x + t * x_stride bytes, in vec_dot_type):
  //   y[t * y_stride + r] = vec_dot(n, row r, token t)
  // bit for bit (gemm_repacked: = vec_dot_repacked; F16: within float rounding, summed in
  // llama.cpp's batch order, one 8-lane accumulator per output), only faster: decoded weight blocks are
  // shared across tokens, activation blocks across rows, and weights are prefetched. Null
  // where a format has none (ops::matmul then loops over vec_dot).
  GemmFn gemm = nullptr;
  GemmFn gemm_repacked = nullptr;
  // vec_dot_repacked is squeeze's own block order, not llama.cpp's (Q8_0 on the AVX-512 and AMX
  // tiers, whose tiles give whole-block sums: llama.cpp's 8 lanes per block would cost them
  // their speed); matrices marked llama_order (ops::WeightView) keep vec_dot.
  bool own_order = false;
  // The same products on activations prepared once per matrix (BatchGemm), where the ISA has
  // them (empty otherwise).
  BatchGemm batch = {};
  BatchGemm batch_repacked = {};
};

// llama.cpp repacks a matrix of a format with vec_dot_repacked when its row count is a
// multiple of this.
inline constexpr int64_t kRepackRows = 8;

// Kernels for `type` on `isa`. A format without a SIMD version of some function gets the
// scalar one. Throws FormatError for an unsupported format, and UsageError for Isa::Avx2 on a
// CPU without AVX2. (A build for a non-x86 target has no AVX2 kernels; there Avx2 gets the
// scalar ones.)
const Kernels& kernels(DType type, Isa isa);
// Kernels on the ISA chosen at start-up (core/cpu.h).
inline const Kernels& kernels(DType type) { return kernels(type, active_isa()); }

}  // namespace squeeze::formats
