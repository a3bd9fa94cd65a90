// Internal: the inner loops of the machine probe (machine.cpp), one scalar and one AVX2 twin
// each. The AVX2 ones live in machine_avx2.cpp, compiled with SQUEEZE_AVX2_FLAGS, and may only
// be called after cpu_has_avx2() (core/cpu.h) said yes.
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

}  // namespace squeeze::eval::detail
