// Tensor formats: ggml's type ids and block layouts, one traits entry per format.
//
// The ids are ggml's (so a GGUF file written by llama.cpp reads as-is). Formats squeeze adds
// later get ids far above ggml's (see docs/FORMATS.md).
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
  BF16 = 30,
};

// Static facts about a format: what a GGUF reader needs to size and validate tensors.
struct FormatInfo {
  DType type;
  std::string_view name;    // ggml's name: "q4_1", "f16", ...
  int64_t block_size;       // elements per block
  size_t block_bytes;       // bytes per block
  bool supported;           // squeeze can dequantize it and compute dot products with it
  DType vec_dot_type;       // format the activations are converted to for vec_dot
};

// Info for a ggml type id, or nullptr for an id squeeze does not know (the GGUF reader
// turns that into a clear error). Known-but-unsupported formats return supported = false.
const FormatInfo* format_info(uint32_t type_id);
const FormatInfo& format_info(DType type);
// Parses a ggml name ("q8_0"); nullptr if unknown.
const FormatInfo* format_by_name(std::string_view name);

// Bytes of a row of n elements (n must be a multiple of the block size).
size_t row_bytes(DType type, int64_t n);

// The kernels of one format on one ISA. All take whole rows: n is a multiple of the block size.
struct Kernels {
  // dst[0..n) = decoded src.
  void (*dequantize_row)(const void* src, float* dst, int64_t n) = nullptr;
  // Encodes n floats into this format (ggml's reference rounding for the activation formats
  // Q8_0 / Q8_1 / Q8_K, so dot products match llama.cpp's).
  void (*quantize_row)(const float* src, void* dst, int64_t n) = nullptr;
  // Dot product of a row in this format with a row in info.vec_dot_type.
  float (*vec_dot)(int64_t n, const void* w, const void* x) = nullptr;
};

// Kernels for `type` on `isa`. A format without a SIMD version of some function gets the
// scalar one. Calling this for an unsupported format throws.
const Kernels& kernels(DType type, Isa isa);
// Kernels on the ISA chosen at start-up (core/cpu.h).
inline const Kernels& kernels(DType type) { return kernels(type, active_isa()); }

}  // namespace squeeze::formats
