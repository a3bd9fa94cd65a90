// The packed sparse format SP8_50 against Q8_0 on the same zeros: a pruned Q8_0 row repacks
// and decodes to the same values, its dot products are vec_dot_q8_0_blocks's bit for bit
// (scalar), the AVX2 and AVX-512 + VBMI2 products equal the scalar one bit for bit, and blocks that do
// not keep exactly 16 weights are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "formats/blocks.h"
#include "formats/format.h"
#include "formats/kernel_list.h"
#include "formats/sparse.h"

namespace squeeze::formats {
namespace {

// Rows of n weights pruned 2:4 (or, with `fewer`, some blocks keep fewer than 16 non-zeros).
std::vector<float> pruned_rows(int64_t rows, int64_t n, uint32_t seed, bool fewer = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  std::vector<float> w(static_cast<size_t>(rows * n));
  for (size_t g = 0; g < w.size(); g += 4) {
    const int keep_a = static_cast<int>(rng() % 4), keep_b = (keep_a + 1 + rng() % 3) % 4;
    for (int j = 0; j < 4; ++j) w[g + j] = (j == keep_a || j == keep_b) ? nd(rng) : 0.0f;
    if (fewer && rng() % 3 == 0) w[g + keep_a] = 0.0f;
  }
  return w;
}

std::vector<uint8_t> q8_0_of(const std::vector<float>& w, int64_t rows, int64_t n) {
  std::vector<uint8_t> q(row_bytes(DType::Q8_0, n) * rows);
  for (int64_t r = 0; r < rows; ++r) {
    kernels(DType::Q8_0, Isa::Scalar)
        .quantize_row_ref(w.data() + r * n, q.data() + r * row_bytes(DType::Q8_0, n), n);
  }
  return q;
}

std::vector<uint8_t> activations(int64_t tokens, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens * n));
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> q(row_bytes(DType::Q8_0, n) * tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    kernels(DType::Q8_0, Isa::Scalar)
        .quantize_row(x.data() + t * n, q.data() + t * row_bytes(DType::Q8_0, n), n);
  }
  return q;
}

TEST(Sparse, RepacksPrunedQ8_0Exactly) {
  const int64_t rows = 5, n = 256;
  for (bool fewer : {false, true}) {
    const std::vector<float> w = pruned_rows(rows, n, 3, fewer);
    const std::vector<uint8_t> q = q8_0_of(w, rows, n);
    std::vector<uint8_t> sp(row_bytes(DType::SP8_50, n) * rows);
    std::vector<uint8_t> from_floats(sp.size());
    const size_t qrb = row_bytes(DType::Q8_0, n), srb = row_bytes(DType::SP8_50, n);
    EXPECT_EQ(srb * 34, qrb * 22);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(sp8_from_q8_0(q.data() + r * qrb, sp.data() + r * srb, n));
      kernels(DType::SP8_50, Isa::Scalar)
          .quantize_row_ref(w.data() + r * n, from_floats.data() + r * srb, n);
      ASSERT_TRUE(sp8_valid(sp.data() + r * srb, n / 32));
      std::vector<float> a(n), b(n);
      kernels(DType::Q8_0, Isa::Scalar).dequantize_row(q.data() + r * qrb, a.data(), n);
      kernels(DType::SP8_50, Isa::Scalar).dequantize_row(sp.data() + r * srb, b.data(), n);
      ASSERT_EQ(a, b) << "row " << r;
    }
    EXPECT_EQ(sp, from_floats);  // the float quantizer writes the same blocks
  }
  // 17 non-zeros in a block: not representable.
  std::vector<float> dense(32, 0.5f);
  for (int j = 17; j < 32; ++j) dense[j] = 0.0f;
  std::vector<uint8_t> q(34), sp(22);
  kernels(DType::Q8_0, Isa::Scalar).quantize_row_ref(dense.data(), q.data(), 32);
  EXPECT_FALSE(sp8_from_q8_0(q.data(), sp.data(), 32));
  // A block whose mask does not hold 16 bits is not valid.
  ASSERT_TRUE(sp8_from_q8_0(q8_0_of(pruned_rows(1, 32, 4), 1, 32).data(), sp.data(), 32));
  EXPECT_TRUE(sp8_valid(sp.data(), 1));
  sp[0] ^= 1;
  EXPECT_FALSE(sp8_valid(sp.data(), 1));
}

TEST(Sparse, DotProductsAreQ8_0BlockOrderBitForBit) {
  // 21 rows: two tiles of 8 and 5 single rows; batches of 1 and 3 tokens (rows8), 5 (rows
  // expanded to q8_0, 4 x 4 tiles) and 20 (expanded, 16-row panels).
  const int64_t rows = 21, n = 576, max_tokens = 20;
  const std::vector<float> w = pruned_rows(rows, n, 7, true);
  const std::vector<uint8_t> q = q8_0_of(w, rows, n);
  const size_t qrb = row_bytes(DType::Q8_0, n), srb = row_bytes(DType::SP8_50, n);
  std::vector<uint8_t> sp(srb * rows);
  for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(sp8_from_q8_0(q.data() + r * qrb, sp.data() + r * srb, n));
  const std::vector<uint8_t> x = activations(max_tokens, n, 8);
  const size_t xrb = row_bytes(DType::Q8_0, n);
  std::vector<float> want(static_cast<size_t>(rows * max_tokens));
  for (int64_t t = 0; t < max_tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      const float dense = scalar::vec_dot_q8_0_blocks(n, q.data() + r * qrb, x.data() + t * xrb);
      const float packed = kernels(DType::SP8_50, Isa::Scalar).vec_dot(n, sp.data() + r * srb, x.data() + t * xrb);
      ASSERT_EQ(dense, packed) << "row " << r << " token " << t;
      want[t * rows + r] = dense;
    }
  }
  std::vector<Isa> tiers;
  if (cpu_has_avx2()) tiers.push_back(Isa::Avx2);
  if (cpu_has_avx512()) tiers.push_back(Isa::Avx512);  // VBMI2's kernel, or else AVX2's
  for (Isa isa : tiers) {
    SCOPED_TRACE(isa == Isa::Avx2 ? "avx2" : "avx512");
    const Kernels& k = kernels(DType::SP8_50, isa);
    ASSERT_NE(k.gemm, nullptr);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(k.vec_dot(n, sp.data() + r * srb, x.data()), want[r]) << "vec_dot row " << r;
    }
    for (int64_t tokens : {1, 3, 5, 20}) {
      SCOPED_TRACE(tokens);
      std::vector<float> got(static_cast<size_t>(rows * tokens), -1.0f);
      k.gemm(n, sp.data(), srb, rows, x.data(), xrb, tokens, got.data(), rows);
      EXPECT_EQ(got, std::vector<float>(want.begin(), want.begin() + rows * tokens));
    }
  }
}

TEST(Sparse, EveryVectorTierHasAGemm) {
  EXPECT_EQ(kernels(DType::SP8_50, Isa::Scalar).gemm, nullptr);
  if (cpu_has_avx2()) {
    EXPECT_EQ(kernels(DType::SP8_50, Isa::Avx2).gemm, avx2::gemm_sp8_50);
  }
  if (cpu_has_avx512()) {
    EXPECT_EQ(kernels(DType::SP8_50, Isa::Avx512).gemm,
              cpu_has_avx512_vbmi2() ? avx512::gemm_sp8_50 : avx2::gemm_sp8_50);
  }
  EXPECT_EQ(format_info(DType::SP8_50).block_bytes, 22u);
  EXPECT_EQ(format_by_name("sp8_50"), &format_info(DType::SP8_50));
}

}  // namespace
}  // namespace squeeze::formats
