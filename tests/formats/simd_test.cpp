// The AVX2 kernels against the scalar reference: decoding bit for bit, activation quantizers
// byte for byte, dot products within float-summation-order noise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "format_test_util.h"
#include "formats/blocks.h"
#include "formats/sq.h"

namespace squeeze::formats::test {
namespace {

// Row lengths that exercise each loop's main body and tail: one block, odd block counts, and
// for the float formats lengths that are not multiples of 8 or 32.
std::vector<int64_t> lengths(DType type) {
  const int64_t bs = format_info(type).block_size;
  if (bs == 1) return {1, 7, 8, 9, 31, 32, 33, 100, 4096, 4099};
  if (bs == 32) return {32, 64, 96, 160, 4096, 4096 + 96};
  return {256, 512, 768, 4096, 4096 + 768};
}

// Equal bits, or both NaN.
void expect_same_floats(const std::vector<float>& a, const std::vector<float>& b,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    ASSERT_EQ(ua, ub) << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

// Random bytes for n elements of `type`, with every scale field set to a finite value (raw
// random halves would include NaN and infinities, which no decoder has to agree on).
std::vector<uint8_t> random_blocks(DType type, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(row_bytes(type, n));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  const FormatInfo& info = format_info(type);
  const auto set_half = [&](uint8_t* p) {
    const f16_t h = f32_to_f16(dist(rng));
    std::memcpy(p, &h, 2);
  };
  for (size_t off = 0; off < bytes.size(); off += info.block_bytes) {
    uint8_t* block = bytes.data() + off;
    if (is_sq(type)) {  // half d, half m, codes
      set_half(block);
      set_half(block + 2);
      continue;
    }
    switch (type) {
      case DType::F32: {
        const float f = dist(rng);
        std::memcpy(block, &f, 4);
        break;
      }
      case DType::Q4_0:
      case DType::Q5_0:
      case DType::Q8_0:
        set_half(block);
        break;
      case DType::Q4_1:
      case DType::Q5_1:
      case DType::Q8_1:
      case DType::Q4_K:
        set_half(block);
        set_half(block + 2);
        break;
      case DType::Q6_K:
        set_half(block + offsetof(BlockQ6_K, d));
        break;
      case DType::Q8_K: {
        const float f = dist(rng);
        std::memcpy(block, &f, 4);
        break;
      }
      default:
        break;  // F16, BF16: every bit pattern is a value
    }
  }
  return bytes;
}

class Simd : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (unavailable(Isa::Avx2)) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  }
};

TEST_P(Simd, DequantizeIsBitIdentical) {
  const DType type = GetParam();
  for (int64_t n : lengths(type)) {
    // Blocks from the quantizer, and blocks of random bytes (every code and bit pattern).
    const std::vector<uint8_t> quantized = quantize(type, Isa::Scalar, uniform(n, 11));
    const std::vector<uint8_t> random = random_blocks(type, n, 12);
    for (const auto* q : {&quantized, &random}) {
      expect_same_floats(dequantize(type, Isa::Scalar, *q, n), dequantize(type, Isa::Avx2, *q, n),
                         std::string(format_info(type).name) + " n=" + std::to_string(n));
    }
  }
}

// Inputs that stress the activation quantizers: ties at .5 after scaling, equal and opposite
// maxima, zero and single-value blocks, tiny and huge magnitudes.
std::vector<std::vector<float>> hard_inputs(int64_t n) {
  std::vector<std::vector<float>> out;
  out.push_back(uniform(n, 21));
  out.push_back(gaussian(n, 22, 3.0f));
  std::vector<float> ties(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    // Multiples of 0.5 with +-127 in every block of 32: scale 1, many exact .5 ties.
    ties[i] = (i % 32 == 0) ? ((i / 32) % 2 ? 127.0f : -127.0f)
                            : 0.5f * static_cast<float>(i % 255 - 127);
  }
  out.push_back(ties);
  std::vector<float> sparse(static_cast<size_t>(n), 0.0f);
  for (int64_t i = 0; i < n; i += 37) sparse[i] = (i % 2) ? 1.0f : -1.0f;  // equal +-maxima
  out.push_back(sparse);
  out.push_back(std::vector<float>(static_cast<size_t>(n), 0.0f));
  std::vector<float> tiny = uniform(n, 23, -1e-30f, 1e-30f);
  out.push_back(tiny);
  std::vector<float> huge = uniform(n, 24, -1e30f, 1e30f);
  out.push_back(huge);
  std::vector<float> mixed = gaussian(n, 25);
  for (int64_t i = 0; i < n; i += 53) mixed[i] *= 1000.0f;
  out.push_back(mixed);
  return out;
}

using SimdActivation = Simd;

TEST_P(SimdActivation, QuantizeIsBitIdentical) {
  const DType type = GetParam();
  for (int64_t n : lengths(type)) {
    auto inputs = hard_inputs(n);
    if (type == DType::F16 || type == DType::BF16 || type == DType::F32) {
      // Any bit pattern: NaN, infinities, subnormals, overflow to infinity.
      std::mt19937 rng(26);
      std::vector<float> bits(static_cast<size_t>(n));
      for (float& f : bits) {
        const uint32_t u = rng();
        std::memcpy(&f, &u, 4);
      }
      inputs.push_back(bits);
    }
    for (size_t k = 0; k < inputs.size(); ++k) {
      const auto a = quantize(type, Isa::Scalar, inputs[k]);
      const auto b = quantize(type, Isa::Avx2, inputs[k]);
      ASSERT_EQ(a, b) << format_info(type).name << " n=" << n << " input " << k;
    }
  }
}

// |simd - scalar| <= 1e-5 * sum|w_i * x_i|: the integer part is exact on both paths, only the
// order of float additions differs.
using SimdVecDot = Simd;

TEST_P(SimdVecDot, MatchesScalar) {
  const DType type = GetParam();
  const DType xtype = format_info(type).vec_dot_type;
  for (int64_t n : lengths(type)) {
    for (uint32_t seed : {31u, 32u, 33u}) {
      const auto w = quantize(type, Isa::Scalar, gaussian(n, seed));
      const auto x = quantize(xtype, Isa::Scalar, gaussian(n, seed + 100));
      const auto wd = dequantize(type, Isa::Scalar, w, n);
      const auto xd = dequantize(xtype, Isa::Scalar, x, n);
      double magnitude = 0.0;
      for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(double(wd[i]) * xd[i]);
      const float s = kernels(type, Isa::Scalar).vec_dot(n, w.data(), x.data());
      const float v = kernels(type, Isa::Avx2).vec_dot(n, w.data(), x.data());
      EXPECT_NEAR(v, s, 1e-5 * magnitude) << format_info(type).name << " n=" << n;
    }
  }
}

std::string type_name(const testing::TestParamInfo<DType>& info) {
  return std::string(format_info(info.param).name);
}

INSTANTIATE_TEST_SUITE_P(Formats, Simd, testing::ValuesIn(supported_types()), type_name);
INSTANTIATE_TEST_SUITE_P(Formats, SimdActivation, testing::ValuesIn(activation_types()), type_name);
INSTANTIATE_TEST_SUITE_P(Formats, SimdVecDot, testing::ValuesIn(weight_types()), type_name);

}  // namespace
}  // namespace squeeze::formats::test
