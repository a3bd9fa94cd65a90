// Internal: the inner loops of the machine probe (machine.cpp), one scalar and one AVX2 twin
// each, plus the compute loops of the AVX-512 and AMX tiers. Each lives in a file compiled for
// its ISA and may only be called after core/cpu.h said the CPU has it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace squeeze::eval::detail {

// Reads words[0, n) once, front to back, and returns a checksum so the loads stay.
// n is a multiple of kReadBlockWords.
inline constexpr size_t kReadBlockWords = 16;  // 128 bytes per loop step
uint64_t stream_read_scalar(const uint64_t* words, size_t n);
uint64_t stream_read_avx2(const uint64_t* words, size_t n);

// Runs `iters` steps of independent multiply-adds and returns a value depending on all of them.
// Each step is kFmaPerIterScalar / kFmaPerIterAvx2 single-precision multiply-adds (2 FLOPs each).
inline constexpr int64_t kFmaPerIterScalar = 32;     // 32 float accumulators
inline constexpr int64_t kFmaPerIterAvx2 = 12 * 8;   // 12 ymm accumulators of 8 floats
float fma_loop_scalar(int64_t iters, float x);
float fma_loop_avx2(int64_t iters, float x);

// The compute roofs of the AVX-512 and AMX tiers, each `iters` steps of independent work, in
// operations (a multiply-add is 2) per step. machine_avx512.cpp (after cpu_has_avx512()):
// FP32 multiply-adds on 512-bit registers and int8 products with vpdpbusd (u8 x s8, 4 per
// 32-bit lane). machine_amx.cpp (after cpu_has_amx()): tile products on four 16 x 16 C tiles,
// tdpbssd (int8, 64 per output) and tdpbf16ps (bf16, 32 per output).
inline constexpr int64_t kFmaPerIterAvx512 = 12 * 16;            // multiply-adds
inline constexpr int64_t kVnniOpsPerIter = 12 * 16 * 4 * 2;      // 12 zmm x 16 lanes x 4
inline constexpr int64_t kAmxInt8OpsPerIter = 4 * 16 * 16 * 64 * 2;
inline constexpr int64_t kAmxBf16OpsPerIter = 4 * 16 * 16 * 32 * 2;
float fma_loop_avx512(int64_t iters, float x);
int32_t vnni_loop(int64_t iters, int32_t x);
int32_t amx_int8_loop(int64_t iters, int32_t x);
float amx_bf16_loop(int64_t iters, float x);

}  // namespace squeeze::eval::detail
