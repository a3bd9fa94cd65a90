// The K-quant products in the orders llama.cpp's x86 build sums them in, which depend on the
// batch: a repacked Q4_K matrix (row count a multiple of 8) through gemv_q4_K_8x8 (one fused
// multiply-add per super-block) or, for tokens in whole groups of 4, gemm_q4_K_8x8 (one per
// pair of sub-blocks); Q4_K and Q6_K matrices it does not repack through vec_dot or, from 8
// tokens on, its tiled kernel (ggml-cpu/tiled). Each order: AVX2 equal to the scalar twin bit for
// bit, within float rounding of the exact dot, and really different from the others on some
// inputs (else the kernel would be pointless); the gemm entries pick them by token as llama.cpp
// does. (That these are llama.cpp's orders is shown end to end: tests/model/gemma3_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "format_test_util.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::test {
namespace {

constexpr int64_t kN = 1024;  // 4 super-blocks

struct Rows {
  std::vector<uint8_t> w, x;
  size_t w_bytes, x_bytes;
};

// n_rows weight rows of `type` and n_tokens Q8_K activation rows with a few large values
// (Gemma's activations carry outliers of hundreds).
Rows make_rows(DType type, int64_t n_rows, int64_t n_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Rows r{{}, {}, row_bytes(type, kN), row_bytes(DType::Q8_K, kN)};
  r.w.resize(r.w_bytes * n_rows);
  r.x.resize(r.x_bytes * n_tokens);
  std::vector<float> tmp(kN);
  for (int64_t i = 0; i < n_rows; ++i) {
    for (float& v : tmp) v = dist(rng) * 0.05f;
    kernels(type, Isa::Scalar).quantize_row_ref(tmp.data(), r.w.data() + i * r.w_bytes, kN);
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (float& v : tmp) v = dist(rng);
    tmp[rng() % kN] = 300.0f;
    kernels(DType::Q8_K, Isa::Scalar).quantize_row(tmp.data(), r.x.data() + t * r.x_bytes, kN);
  }
  return r;
}

double exact_dot(DType type, const uint8_t* w, const uint8_t* x, double* magnitude) {
  std::vector<float> wd(kN), xd(kN);
  kernels(type, Isa::Scalar).dequantize_row(w, wd.data(), kN);
  kernels(DType::Q8_K, Isa::Scalar).dequantize_row(x, xd.data(), kN);
  double sum = 0;
  *magnitude = 0;
  for (int64_t i = 0; i < kN; ++i) {
    sum += double(wd[i]) * xd[i];
    *magnitude += std::abs(double(wd[i]) * xd[i]);
  }
  return sum;
}

struct Order {
  const char* name;
  DType type;
  VecDotFn fn;
};

TEST(LlamaOrder, EveryOrderIsWithinRoundingOfTheExactDot) {
  const Order orders[] = {
      {"q4_K repacked (gemv)", DType::Q4_K, scalar::vec_dot_q4_k_repacked},
      {"q4_K repacked pairs (gemm)", DType::Q4_K, scalar::vec_dot_q4_k_repacked_pairs},
      {"q4_K tiled", DType::Q4_K, scalar::vec_dot_q4_k_tiled},
      {"q6_K tiled", DType::Q6_K, scalar::vec_dot_q6_k_tiled},
  };
  for (const Order& o : orders) {
    const Rows r = make_rows(o.type, 1, 200, 5);
    for (int64_t t = 0; t < 200; ++t) {
      const uint8_t* x = r.x.data() + t * r.x_bytes;
      double magnitude = 0;
      const double exact = exact_dot(o.type, r.w.data(), x, &magnitude);
      ASSERT_NEAR(o.fn(kN, r.w.data(), x), exact, 1e-5 * magnitude) << o.name;
    }
  }
}

TEST(LlamaOrder, TheOrdersDiffer) {
  const auto differ = [](DType type, VecDotFn a, VecDotFn b) {
    const Rows r = make_rows(type, 1, 200, 9);
    int n = 0;
    for (int64_t t = 0; t < 200; ++t) {
      const uint8_t* x = r.x.data() + t * r.x_bytes;
      n += a(kN, r.w.data(), x) != b(kN, r.w.data(), x);
    }
    return n;
  };
  EXPECT_GT(differ(DType::Q4_K, scalar::vec_dot_q4_k_repacked, scalar::vec_dot_q4_k_repacked_pairs), 0);
  EXPECT_GT(differ(DType::Q4_K, scalar::vec_dot_q4_k_repacked, scalar::vec_dot_q4_k_tiled), 0);
  EXPECT_GT(differ(DType::Q6_K, scalar::vec_dot_q6_k, scalar::vec_dot_q6_k_tiled), 0);
  if (cpu_has_avx2()) {
    EXPECT_GT(differ(DType::Q4_K, kernels(DType::Q4_K, Isa::Avx2).vec_dot,
                     kernels(DType::Q4_K, Isa::Avx2).vec_dot_repacked), 0);
  }
}

struct Entry {
  DType type;
  bool repacked;
  VecDotFn grouped;  // the order of the tokens the batch kernel takes
  VecDotFn single;   // the order of the others
};

const Entry kEntries[] = {
    {DType::Q4_K, true, scalar::vec_dot_q4_k_repacked_pairs, scalar::vec_dot_q4_k_repacked},
    {DType::Q4_K, false, scalar::vec_dot_q4_k_tiled, scalar::vec_dot_q4_k},
    {DType::Q6_K, false, scalar::vec_dot_q6_k_tiled, scalar::vec_dot_q6_k},
};
constexpr int64_t kTokenCounts[] = {1, 3, 4, 6, 7, 8, 9, 13};
constexpr int64_t kRows = 8;

std::vector<float> run_gemm(const Entry& e, Isa isa, const Rows& r, int64_t n_tokens) {
  const auto& k = kernels(e.type, isa);
  const GemmFn gemm = e.repacked ? k.gemm_repacked : k.gemm;
  EXPECT_NE(gemm, nullptr);
  std::vector<float> y((kRows + 2) * n_tokens, -7.0f);
  if (gemm != nullptr) gemm(kN, r.w.data(), r.w_bytes, kRows, r.x.data(), r.x_bytes, n_tokens, y.data(), kRows + 2);
  return y;
}

// Kernels::gemm / gemm_repacked of Q4_K and Q6_K pick the order per token as llama.cpp does:
// its repacked gemm takes the tokens in whole groups of 4, its tiled kernel whole batches of 8+.
TEST(LlamaOrder, GemmPicksTheOrderByBatch) {
  for (const Entry& e : kEntries) {
    for (const int64_t n_tokens : kTokenCounts) {
      const Rows r = make_rows(e.type, kRows, n_tokens, 13);
      const std::vector<float> y = run_gemm(e, Isa::Scalar, r, n_tokens);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const bool batch_kernel = e.repacked ? t < n_tokens - n_tokens % 4 : n_tokens >= 8;
        for (int64_t i = 0; i < kRows; ++i) {
          const float want = (batch_kernel ? e.grouped : e.single)(kN, r.w.data() + i * r.w_bytes,
                                                                   r.x.data() + t * r.x_bytes);
          ASSERT_EQ(y[t * (kRows + 2) + i], want)
              << format_info(e.type).name << (e.repacked ? " repacked" : "") << " tokens " << n_tokens
              << " token " << t << " row " << i;
        }
      }
    }
  }
}

// The AVX2 and AVX-512 kernels sum in the same orders bit for bit (vec_dot aside: AVX2's is
// ggml's lanes, the scalar twin's within rounding of it, tests/formats/simd_test.cpp).
TEST(LlamaOrder, SimdEqualsScalarBitForBit) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  for (const Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (!cpu_supports(isa)) continue;
    for (const Entry& e : kEntries) {
      for (const int64_t n_tokens : {1, 3, 4, 6, 7, 8, 9, 13, 17, 24}) {
        if (!e.repacked && n_tokens < 8) continue;  // vec_dot
        const Rows r = make_rows(e.type, kRows, n_tokens, 17);
        EXPECT_EQ(run_gemm(e, isa, r, n_tokens), run_gemm(e, Isa::Scalar, r, n_tokens))
            << isa_name(isa) << " " << format_info(e.type).name << (e.repacked ? " repacked" : "")
            << " tokens " << n_tokens;
      }
    }
  }
  const Rows r = make_rows(DType::Q4_K, 1, 100, 19);
  for (int64_t t = 0; t < 100; ++t) {
    const uint8_t* x = r.x.data() + t * r.x_bytes;
    ASSERT_EQ(kernels(DType::Q4_K, Isa::Avx2).vec_dot_repacked(kN, r.w.data(), x),
              scalar::vec_dot_q4_k_repacked(kN, r.w.data(), x));
  }
}

}  // namespace
}  // namespace squeeze::formats::test
