// Shared helpers of the formats tests: test cases (format x ISA), data generators, and thin
// wrappers that quantize / dequantize / dot whole rows through kernels(type, isa).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "formats/format.h"

namespace squeeze::formats::test {

// squeeze's own formats (formats/sq.h), 2-bit first, groups of 32 first.
inline const std::vector<DType>& sq_types() {
  static const std::vector<DType> types = {
      DType::SQ2_G32, DType::SQ2_G64, DType::SQ2_G128, DType::SQ3_G32, DType::SQ3_G64,
      DType::SQ3_G128, DType::SQ4_G32, DType::SQ4_G64, DType::SQ4_G128};
  return types;
}

// The formats squeeze supports, weights first, then the activation-only ones.
inline const std::vector<DType>& supported_types() {
  static const std::vector<DType> types = [] {
    std::vector<DType> t = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                            DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q6_K};
    t.insert(t.end(), sq_types().begin(), sq_types().end());
    t.push_back(DType::Q8_1);
    t.push_back(DType::Q8_K);
    return t;
  }();
  return types;
}

inline bool is_activation_only(DType t) { return t == DType::Q8_1 || t == DType::Q8_K; }

struct Case {
  DType type;
  Isa isa;
};

inline std::string case_name(const testing::TestParamInfo<Case>& info) {
  return std::string(format_info(info.param.type).name) + "_" +
         std::string(isa_name(info.param.isa));
}

inline std::vector<Case> cases_for(const std::vector<DType>& types, const std::vector<Isa>& isas) {
  std::vector<Case> out;
  for (DType t : types) {
    for (Isa isa : isas) out.push_back({t, isa});
  }
  return out;
}

inline std::vector<DType> weight_types() {
  std::vector<DType> out;
  for (DType t : supported_types()) {
    if (!is_activation_only(t)) out.push_back(t);
  }
  return out;
}

// The distinct activation formats (what weights' vec_dot_type names), plus the float ones.
inline std::vector<DType> activation_types() {
  return {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q8_1, DType::Q8_K};
}

// True when tests for this ISA must be skipped (GTEST_SKIP) because the CPU cannot run it.
inline bool unavailable(Isa isa) { return isa == Isa::Avx2 && !cpu_has_avx2(); }

inline std::vector<float> uniform(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint8_t> quantize(DType type, Isa isa, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> out(row_bytes(type, n));
  kernels(type, isa).quantize_row(x.data(), out.data(), n);
  return out;
}

inline std::vector<float> dequantize(DType type, Isa isa, const std::vector<uint8_t>& q,
                                     int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  kernels(type, isa).dequantize_row(q.data(), out.data(), n);
  return out;
}

// Row length used by most tests: a multiple of every block size, long enough for the AVX2
// loops' main bodies and tails.
constexpr int64_t kRow = 4096;

}  // namespace squeeze::formats::test
