// squeeze's own sq{B}_g{G} formats (formats/sq.h): the packing API and its bit layout as
// docs/FORMATS.md states it, decoding as exactly d * q + m, the round-to-nearest quantizer, the
// dot product's formula, and the AVX2 kernels (also behind Isa::Avx512) and the tiled products of
// both tiers bit for bit against the scalar twins. (The generic tests also cover these formats:
// round trip RMS bounds, vec_dot against the decoded rows, AVX2 decoding of random bytes, gemm
// on every tile shape.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "core/error.h"
#include "format_test_util.h"
#include "formats/blocks.h"
#include "formats/sq.h"

namespace squeeze::formats::test {
namespace {

int64_t group_of(DType t) { return format_info(t).block_size; }
int max_code(DType t) { return (1 << sq_bits(t)) - 1; }
std::string name_of(DType t) { return std::string(format_info(t).name); }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// A float that is exactly a half: what a quantizer passes as d or m.
float random_half(std::mt19937& rng, float lo, float hi) {
  return f16_to_f32(f32_to_f16(std::uniform_real_distribution<float>(lo, hi)(rng)));
}

// A row of n elements in format t: random codes, random half d (>= 0) and m per group.
std::vector<uint8_t> random_row(DType t, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const FormatInfo& info = format_info(t);
  std::vector<uint8_t> row(row_bytes(t, n));
  std::vector<uint8_t> codes(static_cast<size_t>(info.block_size));
  for (size_t off = 0; off < row.size(); off += info.block_bytes) {
    for (uint8_t& q : codes) q = static_cast<uint8_t>(rng() % (max_code(t) + 1));
    sq_pack_block(t, random_half(rng, 0.0f, 0.1f), random_half(rng, -1.0f, 1.0f), codes.data(),
                  row.data() + off);
  }
  return row;
}

// Q8_1 activations of n elements: quantized gaussians (some blocks 50x larger), or random
// blocks (every int8 including -128, finite d and s) that no quantizer would write.
std::vector<uint8_t> activations(int64_t n, uint32_t seed, bool random_bytes) {
  std::vector<uint8_t> x(row_bytes(DType::Q8_1, n));
  if (!random_bytes) {
    std::vector<float> v = gaussian(n, seed);
    for (int64_t i = 0; i < n; ++i) v[i] *= (i / 32) % 7 == 3 ? 50.0f : 1.0f;
    kernels(DType::Q8_1, Isa::Scalar).quantize_row(v.data(), x.data(), n);
    return x;
  }
  std::mt19937 rng(seed);
  auto* b = reinterpret_cast<BlockQ8_1*>(x.data());
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    for (int8_t& q : b[i].qs) q = static_cast<int8_t>(rng());
    b[i].d = f32_to_f16(random_half(rng, 0.0f, 0.05f));
    b[i].s = f32_to_f16(random_half(rng, -8.0f, 8.0f));
  }
  return x;
}

// Rows the AVX2 loops are tested on: the lengths of the model's matrices (576, 1536), others,
// and for g32 odd group counts (the tail of the two-accumulator loop).
std::vector<int64_t> lengths(DType t) {
  std::vector<int64_t> out;
  for (int64_t n : {32, 64, 96, 128, 160, 192, 384, 576, 1536, 4096 + 96}) {
    if (n % group_of(t) == 0) out.push_back(n);
  }
  return out;
}

// The SIMD tiers this CPU has (the Avx512 table reuses the AVX2 vec_dot and dequantize_row of
// these formats and has its own gemm).
std::vector<Isa> simd_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (cpu_supports(isa)) out.push_back(isa);
  }
  return out;
}

TEST(SqApi, BitsGroupsAndTypes) {
  const DType expected[3][3] = {{DType::SQ2_G32, DType::SQ2_G64, DType::SQ2_G128},
                                {DType::SQ3_G32, DType::SQ3_G64, DType::SQ3_G128},
                                {DType::SQ4_G32, DType::SQ4_G64, DType::SQ4_G128}};
  for (int b = 0; b < 3; ++b) {
    for (int g = 0; g < 3; ++g) {
      const DType t = expected[b][g];
      const int bits = b + 2;
      const int64_t group = int64_t{32} << g;
      EXPECT_EQ(static_cast<uint32_t>(t), 1000u + 3u * b + g);
      EXPECT_TRUE(is_sq(t));
      EXPECT_EQ(sq_bits(t), bits);
      EXPECT_EQ(sq_group(t), group);
      EXPECT_EQ(sq_type(bits, group), t);
      EXPECT_EQ(format_info(t).block_size, group);
      EXPECT_EQ(format_info(t).block_bytes, static_cast<size_t>(4 + group * bits / 8));
      EXPECT_EQ(format_info(t).name, "sq" + std::to_string(bits) + "_g" + std::to_string(group));
      EXPECT_TRUE(format_info(t).supported);
    }
  }
  for (DType t : {DType::F32, DType::Q4_1, DType::Q8_1, DType::Q4_K, DType::Q1_0}) {
    EXPECT_FALSE(is_sq(t)) << name_of(t);
    EXPECT_THROW(sq_bits(t), UsageError);
    EXPECT_THROW(sq_group(t), UsageError);
  }
  EXPECT_FALSE(is_sq(static_cast<DType>(999)));
  EXPECT_FALSE(is_sq(static_cast<DType>(1009)));
  const std::pair<int, int64_t> unsupported[] = {{1, 32}, {5, 32}, {8, 64}, {4, 16},
                                                  {4, 256}, {3, 96}, {2, 0}};
  for (const auto& [bits, group] : unsupported) {
    EXPECT_THROW(sq_type(bits, group), UsageError) << bits << " " << group;
  }
}

class Sq : public testing::TestWithParam<DType> {};

// Pack then unpack gives the codes, d and m back, and writes exactly block_bytes.
TEST_P(Sq, PackUnpackRoundTrip) {
  const DType t = GetParam();
  const FormatInfo& info = format_info(t);
  std::mt19937 rng(5);
  std::vector<uint8_t> codes(static_cast<size_t>(info.block_size)), back(codes.size());
  for (int trial = 0; trial < 200; ++trial) {
    for (uint8_t& q : codes) q = static_cast<uint8_t>(rng() % (max_code(t) + 1));
    if (trial == 0) std::fill(codes.begin(), codes.end(), static_cast<uint8_t>(max_code(t)));
    if (trial == 1) std::fill(codes.begin(), codes.end(), 0);
    const float d = random_half(rng, -1.0f, 1.0f);
    const float m = trial == 2 ? -0.0f : random_half(rng, -100.0f, 100.0f);
    std::vector<uint8_t> bytes(info.block_bytes + 8, 0xA5);
    sq_pack_block(t, d, m, codes.data(), bytes.data());
    for (size_t i = info.block_bytes; i < bytes.size(); ++i) {
      ASSERT_EQ(bytes[i], 0xA5) << "wrote past the block";
    }
    float d2, m2;
    sq_unpack_block(t, bytes.data(), back.data(), &d2, &m2);
    ASSERT_EQ(back, codes) << name_of(t) << " trial " << trial;
    ASSERT_TRUE(same_bits(d2, d) && same_bits(m2, m)) << d << " " << d2 << " " << m << " " << m2;
  }
}

// sq_pack_block converts d and m to half (round to nearest even) and keeps only the low B
// bits of each code.
TEST_P(Sq, PackRoundsScalesAndMasksCodes) {
  const DType t = GetParam();
  const FormatInfo& info = format_info(t);
  std::vector<uint8_t> codes(static_cast<size_t>(info.block_size));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 37 + 11);
  std::vector<uint8_t> bytes(info.block_bytes);
  sq_pack_block(t, 0.1f, -1.0f / 3, codes.data(), bytes.data());
  std::vector<uint8_t> back(codes.size());
  float d, m;
  sq_unpack_block(t, bytes.data(), back.data(), &d, &m);
  EXPECT_EQ(d, f16_to_f32(f32_to_f16(0.1f)));
  EXPECT_EQ(m, f16_to_f32(f32_to_f16(-1.0f / 3)));
  for (size_t i = 0; i < codes.size(); ++i) ASSERT_EQ(back[i], codes[i] & max_code(t)) << i;
}

// The bytes are exactly docs/FORMATS.md's layout, written out here independently: half d, half
// m, then per sub-block of 32 (element e): 4 bits: byte e % 16, bits 4 * (e / 16); 2 bits:
// byte e % 8, bits 2 * (e / 8); 3 bits: the low two bits as for 2 bits, bit 2 in byte
// 8 + e % 4, bit e / 4.
TEST_P(Sq, BytesFollowTheDocumentedLayout) {
  const DType t = GetParam();
  const int bits = sq_bits(t);
  const FormatInfo& info = format_info(t);
  std::mt19937 rng(6);
  std::vector<uint8_t> codes(static_cast<size_t>(info.block_size));
  for (uint8_t& q : codes) q = static_cast<uint8_t>(rng() % (max_code(t) + 1));
  std::vector<uint8_t> want(info.block_bytes, 0);
  const f16_t d = 0x2E66, m = 0xB8CD;  // about 0.1 and -0.6
  std::memcpy(want.data(), &d, 2);
  std::memcpy(want.data() + 2, &m, 2);
  for (size_t i = 0; i < codes.size(); ++i) {
    uint8_t* sub = want.data() + 4 + (i / 32) * 4 * bits;
    const int e = static_cast<int>(i % 32), q = codes[i];
    if (bits == 4) {
      sub[e % 16] |= static_cast<uint8_t>(q << (4 * (e / 16)));
    } else {
      sub[e % 8] |= static_cast<uint8_t>((q & 3) << (2 * (e / 8)));
      if (bits == 3) sub[8 + e % 4] |= static_cast<uint8_t>((q >> 2) << (e / 4));
    }
  }
  std::vector<uint8_t> got(info.block_bytes);
  sq_pack_block(t, f16_to_f32(d), f16_to_f32(m), codes.data(), got.data());
  EXPECT_EQ(got, want);
}

// Every element decodes to exactly d * (float)q + m (a multiply, then an add), on every ISA.
TEST_P(Sq, DequantizeIsDTimesQPlusM) {
  const DType t = GetParam();
  const int64_t group = group_of(t);
  const FormatInfo& info = format_info(t);
  std::vector<Isa> isas = simd_isas();
  isas.push_back(Isa::Scalar);
  for (int64_t n : lengths(t)) {
    const std::vector<uint8_t> row = random_row(t, n, 7 + static_cast<uint32_t>(n));
    std::vector<float> want(static_cast<size_t>(n));
    std::vector<uint8_t> codes(static_cast<size_t>(group));
    for (int64_t g = 0; g < n / group; ++g) {
      float d, m;
      sq_unpack_block(t, row.data() + g * info.block_bytes, codes.data(), &d, &m);
      for (int64_t j = 0; j < group; ++j) {
        volatile float dq = d * static_cast<float>(codes[j]);  // no contraction into an FMA
        want[g * group + j] = dq + m;
      }
    }
    for (Isa isa : isas) {
      const std::vector<float> got = dequantize(t, isa, row, n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(same_bits(got[i], want[i]))
            << name_of(t) << " " << isa_name(isa) << " n=" << n << " element " << i << ": "
            << got[i] << " vs " << want[i];
      }
    }
  }
}

// quantize_row_ref: d and m are the half-rounded (max - min) / (2^B - 1) and min of each
// group; every element lies within d / 2 of its decoded value, except where rounding d and m
// to half moved the grid's ends inside [min, max] (then by at most that much). quantize_row
// is the same function, on every ISA.
TEST_P(Sq, QuantizeIsRoundToNearestPerGroup) {
  const DType t = GetParam();
  const int64_t group = group_of(t);
  const FormatInfo& info = format_info(t);
  const auto& k = kernels(t, Isa::Scalar);
  EXPECT_EQ(k.quantize_row, k.quantize_row_ref);
  for (Isa isa : simd_isas()) EXPECT_EQ(kernels(t, isa).quantize_row_ref, k.quantize_row_ref);
  const int64_t n = 4096;
  std::vector<float> x = gaussian(n, 8, 0.02f);
  for (int64_t i = 0; i < n; i += 97) x[i] *= 40.0f;  // outliers
  for (int64_t i = 0; i < n; ++i) x[i] += (i / group) % 3 == 1 ? 5.0f : 0.0f;  // offset groups
  std::vector<uint8_t> row(row_bytes(t, n));
  k.quantize_row_ref(x.data(), row.data(), n);
  const std::vector<float> y = dequantize(t, Isa::Scalar, row, n);
  std::vector<uint8_t> codes(static_cast<size_t>(group));
  int interior = 0;
  for (int64_t g = 0; g < n / group; ++g) {
    const float* xg = x.data() + g * group;
    const float lo = *std::min_element(xg, xg + group), hi = *std::max_element(xg, xg + group);
    const float d_exact = (hi - lo) / static_cast<float>(max_code(t));
    float d, m;
    sq_unpack_block(t, row.data() + g * info.block_bytes, codes.data(), &d, &m);
    ASSERT_EQ(d, f16_to_f32(f32_to_f16(d_exact))) << "group " << g;
    ASSERT_EQ(m, f16_to_f32(f32_to_f16(lo))) << "group " << g;
    const double ends = std::fabs(double(m) - lo) + max_code(t) * std::fabs(double(d) - d_exact);
    const double ulps = 1e-6 * (std::fabs(lo) + std::fabs(hi));  // float rounding of x - m, d*q + m
    for (int64_t j = 0; j < group; ++j) {
      const double err = std::fabs(double(xg[j]) - y[g * group + j]);
      ASSERT_LE(err, d / 2.0 + ends + ulps) << name_of(t) << " group " << g << " element " << j;
      if (codes[j] > 0 && codes[j] < max_code(t)) {
        ++interior;
        ASSERT_LE(err, d / 2.0 + ulps) << name_of(t) << " group " << g << " element " << j;
      }
    }
  }
  EXPECT_GT(interior, n / 4);
}

// Ties round to even, codes clamp at the ends, and a group of equal values has d = 0, codes 0
// and decodes to m; a zero row is all zero bytes.
TEST_P(Sq, QuantizeEdgeCases) {
  const DType t = GetParam();
  const int64_t group = group_of(t);
  const FormatInfo& info = format_info(t);
  const auto quantize_ref = kernels(t, Isa::Scalar).quantize_row_ref;
  std::vector<uint8_t> block(info.block_bytes), codes(static_cast<size_t>(group));
  float d, m;

  // min 0, max 2^B - 1: d = 1, m = 0, so the code of x is x rounded, halves to even.
  std::vector<float> x(static_cast<size_t>(group), 0.0f);
  x[0] = static_cast<float>(max_code(t));
  x[1] = 0.5f;
  x[2] = 1.5f;
  x[3] = 2.5f;
  x[4] = 1.49f;
  quantize_ref(x.data(), block.data(), group);
  sq_unpack_block(t, block.data(), codes.data(), &d, &m);
  EXPECT_EQ(d, 1.0f);
  EXPECT_EQ(m, 0.0f);
  EXPECT_EQ(codes[0], max_code(t));
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(codes[2], 2);
  EXPECT_EQ(codes[3], 2);
  EXPECT_EQ(codes[4], 1);

  // All equal: d = 0, codes 0, every element decodes to m (on every ISA).
  std::vector<float> flat(static_cast<size_t>(2 * group), -0.3f);
  std::fill(flat.begin() + group, flat.end(), 7.25f);
  std::vector<uint8_t> row(row_bytes(t, 2 * group));
  quantize_ref(flat.data(), row.data(), 2 * group);
  for (int g = 0; g < 2; ++g) {
    sq_unpack_block(t, row.data() + g * info.block_bytes, codes.data(), &d, &m);
    EXPECT_EQ(d, 0.0f);
    EXPECT_EQ(m, f16_to_f32(f32_to_f16(flat[g * group])));
    for (uint8_t q : codes) EXPECT_EQ(q, 0);
  }
  std::vector<Isa> isas = simd_isas();
  isas.push_back(Isa::Scalar);
  for (Isa isa : isas) {
    const std::vector<float> y = dequantize(t, isa, row, 2 * group);
    EXPECT_EQ(y[0], f16_to_f32(f32_to_f16(-0.3f))) << isa_name(isa);
    EXPECT_EQ(y[2 * group - 1], 7.25f) << isa_name(isa);
  }

  const std::vector<float> zeros(static_cast<size_t>(group), 0.0f);
  quantize_ref(zeros.data(), block.data(), group);
  for (uint8_t byte : block) EXPECT_EQ(byte, 0);
}

// vec_dot is sum over sub-blocks s of d_w * d_x * sum(q_w * q_x) + m_w * s_x (the Q8_1 block's
// stored s, like q4_1's): against that formula summed in double, it may differ only by float
// rounding of its n / 32 scaled terms.
TEST_P(Sq, VecDotIsTheQ4_1Formula) {
  const DType t = GetParam();
  const int64_t group = group_of(t);
  const FormatInfo& info = format_info(t);
  for (int64_t n : lengths(t)) {
    for (bool random_bytes : {false, true}) {
      const std::vector<uint8_t> w = random_row(t, n, 9 + static_cast<uint32_t>(n));
      const std::vector<uint8_t> x = activations(n, 10 + static_cast<uint32_t>(n), random_bytes);
      const auto* xb = reinterpret_cast<const BlockQ8_1*>(x.data());
      double want = 0.0, magnitude = 0.0;
      std::vector<uint8_t> codes(static_cast<size_t>(group));
      for (int64_t g = 0; g < n / group; ++g) {
        float d, m;
        sq_unpack_block(t, w.data() + g * info.block_bytes, codes.data(), &d, &m);
        for (int64_t s = 0; s < group / 32; ++s) {
          const BlockQ8_1& b = xb[g * group / 32 + s];
          int64_t sumi = 0;
          for (int j = 0; j < 32; ++j) sumi += codes[s * 32 + j] * b.qs[j];
          const double scaled = double(d * f16_to_f32(b.d)) * sumi;
          const double mins = double(m) * f16_to_f32(b.s);
          want += scaled + mins;
          magnitude += std::fabs(scaled) + std::fabs(mins);
        }
      }
      const float got = kernels(t, Isa::Scalar).vec_dot(n, w.data(), x.data());
      EXPECT_NEAR(got, want, 1e-6 * magnitude) << name_of(t) << " n=" << n;
    }
  }
}

// The AVX2 kernels (also the Avx512 table's vec_dot and dequantize_row) give the scalar twins'
// bits: decoding is d * q + m on both, and the dot products sum in the same order (two
// alternating lanes.h accumulators, see scalar_sq.cpp).
TEST_P(Sq, SimdIsBitIdenticalToScalar) {
  const DType t = GetParam();
  const std::vector<Isa> isas = simd_isas();
  if (isas.empty()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  const Kernels& s = kernels(t, Isa::Scalar);
  for (Isa isa : isas) {
    const Kernels& v = kernels(t, isa);
    EXPECT_NE(v.vec_dot, s.vec_dot);
    EXPECT_NE(v.dequantize_row, s.dequantize_row);
    EXPECT_NE(v.gemm, nullptr);  // tiled products (GemmIsBitIdenticalToVecDot)
    EXPECT_EQ(v.vec_dot_repacked, nullptr);
  }
  for (int64_t n : lengths(t)) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      std::vector<std::vector<uint8_t>> rows = {random_row(t, n, seed)};
      std::vector<uint8_t> q(row_bytes(t, n));
      s.quantize_row_ref(gaussian(n, seed + 50, 0.05f).data(), q.data(), n);
      rows.push_back(q);
      for (const auto& w : rows) {
        const std::vector<float> ref = dequantize(t, Isa::Scalar, w, n);
        for (bool random_bytes : {false, true}) {
          const std::vector<uint8_t> x = activations(n, seed + 100, random_bytes);
          const float want = s.vec_dot(n, w.data(), x.data());
          for (Isa isa : isas) {
            const std::vector<float> got = dequantize(t, isa, w, n);
            for (int64_t i = 0; i < n; ++i) {
              ASSERT_TRUE(same_bits(got[i], ref[i])) << name_of(t) << " n=" << n << " " << i;
            }
            const float dot = kernels(t, isa).vec_dot(n, w.data(), x.data());
            ASSERT_TRUE(same_bits(dot, want))
                << name_of(t) << " " << isa_name(isa) << " n=" << n << " seed " << seed << ": "
                << dot << " vs " << want;
          }
        }
      }
    }
  }
}

// The tiled products (Kernels::gemm, AVX2 and AVX-512 tiers) give the scalar vec_dot's bits for
// every output, also on codes and activations no quantizer writes (every int8 including -128,
// all codes at the maximum), in prefill (>= 4 tokens) and decode (1-3 tokens) shapes; the
// generic shape and stride coverage is in gemm_test.cpp.
TEST_P(Sq, GemmIsBitIdenticalToVecDot) {
  const DType t = GetParam();
  const std::vector<Isa> isas = simd_isas();
  if (isas.empty()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  const Kernels& s = kernels(t, Isa::Scalar);
  for (int64_t n : lengths(t)) {
    const size_t ws = row_bytes(t, n);
    const size_t xs = row_bytes(DType::Q8_1, n);
    constexpr int64_t kRows = 9;
    std::vector<uint8_t> w;
    for (int64_t r = 0; r < kRows; ++r) {
      std::vector<uint8_t> row = random_row(t, n, static_cast<uint32_t>(7 + r));
      if (r == 4) {  // every code at the maximum
        std::vector<uint8_t> codes(static_cast<size_t>(group_of(t)), static_cast<uint8_t>(max_code(t)));
        for (size_t off = 0; off < row.size(); off += format_info(t).block_bytes) {
          sq_pack_block(t, 0.0625f, -0.5f, codes.data(), row.data() + off);
        }
      }
      w.insert(w.end(), row.begin(), row.end());
    }
    for (int64_t n_tokens : {1, 3, 6}) {
      std::vector<uint8_t> x;
      for (int64_t k = 0; k < n_tokens; ++k) {
        const std::vector<uint8_t> a = activations(n, static_cast<uint32_t>(200 + k), k % 2 == 1);
        x.insert(x.end(), a.begin(), a.end());
      }
      for (Isa isa : isas) {
        std::vector<float> y(kRows * n_tokens);
        kernels(t, isa).gemm(n, w.data(), ws, kRows, x.data(), xs, n_tokens, y.data(), kRows);
        for (int64_t k = 0; k < n_tokens; ++k) {
          for (int64_t r = 0; r < kRows; ++r) {
            const float want = s.vec_dot(n, w.data() + r * ws, x.data() + k * xs);
            ASSERT_TRUE(same_bits(y[k * kRows + r], want))
                << name_of(t) << " " << isa_name(isa) << " n=" << n << " tokens " << n_tokens
                << " at (" << r << ", " << k << "): " << y[k * kRows + r] << " vs " << want;
          }
        }
      }
    }
  }
}

std::string type_name(const testing::TestParamInfo<DType>& info) { return name_of(info.param); }

INSTANTIATE_TEST_SUITE_P(Formats, Sq, testing::ValuesIn(sq_types()), type_name);

}  // namespace
}  // namespace squeeze::formats::test
