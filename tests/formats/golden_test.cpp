// Outside reference: bytes and decoded values equal what gguf-py (llama.cpp's Python package,
// a numpy re-implementation of ggml's reference quantizers and decoders) produces for the same
// inputs. The hashes come from make_golden.py beside this file, which also documents how to
// regenerate them; the inputs are made by the same LCG on both sides.
#include <gtest/gtest.h>

#include <cstring>

#include "format_test_util.h"

namespace squeeze::formats::test {
namespace {

constexpr int64_t kGoldenRow = 1024;

struct Lcg {
  uint32_t state;
  uint32_t next() {
    state = state * 1664525u + 1013904223u;
    return state;
  }
};

// kGoldenRow floats in [-1, 1) * 2^(block % 5 - 2), each exact in float.
std::vector<float> golden_input(uint32_t seed) {
  Lcg rng{seed};
  std::vector<float> x(kGoldenRow);
  for (int64_t i = 0; i < kGoldenRow; ++i) {
    const double v = (static_cast<double>(rng.next() >> 8) - (1 << 23)) * std::ldexp(1.0, -23);
    x[i] = static_cast<float>(std::ldexp(v, static_cast<int>((i / 32) % 5) - 2));
  }
  return x;
}

// Random bytes, with the half scale fields set to magnitudes in [0.125, 0.25).
std::vector<uint8_t> golden_blocks(DType type, uint32_t seed) {
  Lcg rng{seed};
  std::vector<uint8_t> bytes(row_bytes(type, kGoldenRow));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng.next() >> 24);
  std::vector<size_t> fields;
  switch (type) {
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
      fields = {0, 2};
      break;
    case DType::Q6_K:
      fields = {208};
      break;
    default:
      fields = {0};
      break;
  }
  const size_t block_bytes = format_info(type).block_bytes;
  for (size_t off = 0; off < bytes.size(); off += block_bytes) {
    for (size_t f : fields) {
      const uint32_t s = rng.next();
      const uint32_t h = ((s >> 31) << 15) | 0x3000u | ((s >> 16) & 0x3FFu);
      bytes[off + f] = static_cast<uint8_t>(h & 0xFF);
      bytes[off + f + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
  return bytes;
}

uint64_t fnv1a(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

struct GoldenHash {
  DType type;
  uint64_t hash;
};

// Quantized bytes of golden_input(2024).
constexpr GoldenHash kQuantized[] = {
    {DType::F16, 0xd6affc5cfda1d3b1ull},  {DType::BF16, 0x53bd762a9fb80c90ull},
    {DType::Q4_0, 0x7651342645641755ull}, {DType::Q4_1, 0xef5f35c46d8597c2ull},
    {DType::Q5_0, 0xb2b097be3ea56c72ull}, {DType::Q5_1, 0x43599a32b8fc3891ull},
    {DType::Q8_0, 0x88a62cac030338acull},
};

// Decoded floats of golden_blocks(type, 77).
constexpr GoldenHash kDecoded[] = {
    {DType::Q4_0, 0x4f6fbad1ec3faaacull}, {DType::Q4_1, 0x37543c92e25a02c3ull},
    {DType::Q5_0, 0x455ba6b0c8cfd163ull}, {DType::Q5_1, 0xe036c1abe41db59eull},
    {DType::Q8_0, 0xfc71632ee9623b5eull}, {DType::Q4_K, 0xbf57fe4a87590e6dull},
    {DType::Q6_K, 0xaa37cbe50730a0a8ull},
};

class GgufPy : public testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (unavailable(GetParam())) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  }
};

TEST_P(GgufPy, QuantizedBytesMatchGgufPy) {
  const std::vector<float> x = golden_input(2024);
  for (const auto& g : kQuantized) {
    const std::vector<uint8_t> q = quantize(g.type, GetParam(), x);
    EXPECT_EQ(fnv1a(q.data(), q.size()), g.hash) << format_info(g.type).name;
  }
}

TEST_P(GgufPy, DecodedValuesMatchGgufPy) {
  for (const auto& g : kDecoded) {
    const std::vector<float> y =
        dequantize(g.type, GetParam(), golden_blocks(g.type, 77), kGoldenRow);
    EXPECT_EQ(fnv1a(y.data(), y.size() * sizeof(float)), g.hash) << format_info(g.type).name;
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, GgufPy, testing::Values(Isa::Scalar, Isa::Avx2),
                         [](const testing::TestParamInfo<Isa>& info) {
                           return std::string(isa_name(info.param));
                         });

}  // namespace
}  // namespace squeeze::formats::test
