// Kernels::gemm / gemm_repacked: the tiled products equal a loop of the format's vec_dot
// (vec_dot_repacked) bit for bit (F16: within float rounding), on every tile shape and edge (rows and tokens not multiples
// of the tile, one token = the decode path), with padded strides, and against the scalar twin.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "format_test_util.h"
#include "formats/sq.h"

namespace squeeze::formats::test {
namespace {

struct Case {
  DType type;
  bool repacked;
  bool exact = true;  // bit-identical to vec_dot (the integer formats)
  Isa isa = Isa::Avx2;
  // Batches of 16+ tokens and rows in and across whole 16 x 16 tiles (AMX's tile shape).
  bool tiles_of_16 = false;
};

class Gemm : public ::testing::TestWithParam<Case> {};

TEST_P(Gemm, EqualsVecDotLoopBitForBit) {
  const Case c = GetParam();
  if (!cpu_supports(c.isa)) GTEST_SKIP() << "this CPU lacks " << isa_name(c.isa);
  const auto& k = kernels(c.type, c.isa);
  const auto& ks = kernels(c.type, Isa::Scalar);
  const GemmFn gemm = c.repacked ? k.gemm_repacked : k.gemm;
  ASSERT_NE(gemm, nullptr);
  // The scalar twin. Q8_0's block order is the AVX-512 and AMX tiers' only (the scalar table
  // sums Q8_0 in llama.cpp's lanes): their vec_dot_repacked is the scalar function itself.
  // Q5_0's scalar vec_dot sums whole blocks, not ggml's 8 lanes: its twin is the AVX2 vec_dot.
  const auto vec_dot = c.type == DType::Q5_0            ? kernels(c.type, Isa::Avx2).vec_dot
                       : !c.repacked                     ? ks.vec_dot
                       : ks.vec_dot_repacked != nullptr ? ks.vec_dot_repacked
                                                        : k.vec_dot_repacked;
  ASSERT_NE(vec_dot, nullptr);
  const DType xt = format_info(c.type).vec_dot_type;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t block = format_info(c.type).block_size;
  // Row lengths: the model's (576, 1536); for the sq formats also odd group counts (the g32
  // tiles alternate accumulators by group), every group size's multiples, and one row longer
  // than the tiles' stack buffer of prepared activations (512 blocks of 32).
  std::vector<int64_t> lengths = {32, 576, 1536};
  if (is_sq(c.type)) lengths = {32, 64, 96, 128, 384, 576, 1536, 16384 + 384};
  for (const int64_t n : lengths) {
    if (n % block != 0) continue;
    const bool long_row = n > 1536;
    const std::vector<int64_t> row_counts =
        c.tiles_of_16 ? std::vector<int64_t>{1, 5, 16, 17, 33} : std::vector<int64_t>{1, 2, 3, 5, 8, 13, 20};
    const std::vector<int64_t> token_counts =
        c.tiles_of_16 ? std::vector<int64_t>{1, 15, 16, 17, 33, 64} : std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 9};
    for (const int64_t n_rows : row_counts) {
      if (long_row && n_rows != 5 && n_rows != 13) continue;
      for (const int64_t n_tokens : token_counts) {
        if (long_row && n_tokens != 1 && n_tokens != 6) continue;
        if (!is_sq(c.type) && (n_tokens == 3 || n_tokens == 5 || n_tokens == 6)) continue;
        // Rows and tokens padded by a few bytes, as a strided view would be.
        const size_t ws = row_bytes(c.type, n) + 6;
        const size_t xs = row_bytes(xt, n) + 10;
        std::vector<uint8_t> w(ws * n_rows), x(xs * n_tokens);
        std::vector<float> tmp(n);
        for (int64_t r = 0; r < n_rows; ++r) {
          for (float& v : tmp) v = dist(rng);
          ks.quantize_row_ref(tmp.data(), w.data() + r * ws, n);
        }
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (float& v : tmp) v = dist(rng) * (t % 3 == 0 ? 5.0f : 0.1f);
          kernels(xt, Isa::Scalar).quantize_row(tmp.data(), x.data() + t * xs, n);
        }
        const int64_t ys = n_rows + 3;
        std::vector<float> y(ys * n_tokens, -7.0f);
        gemm(n, w.data(), ws, n_rows, x.data(), xs, n_tokens, y.data(), ys);
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < n_rows; ++r) {
            const float want = vec_dot(n, w.data() + r * ws, x.data() + t * xs);
            const float got = y[t * ys + r];
            if (!c.exact) {
              // F16: another summation order; within float rounding of the scalar (double) sum.
              std::vector<float> wd(n), xd(n);
              ks.dequantize_row(w.data() + r * ws, wd.data(), n);
              kernels(xt, Isa::Scalar).dequantize_row(x.data() + t * xs, xd.data(), n);
              double mag = 0;
              for (int64_t i = 0; i < n; ++i) mag += std::abs(double(wd[i]) * xd[i]);
              ASSERT_NEAR(got, want, 1e-6 * mag + 1e-30) << "n " << n << " at (" << r << ", " << t << ")";
              continue;
            }
            ASSERT_EQ(std::memcmp(&want, &got, sizeof want), 0)
                << "n " << n << " rows " << n_rows << " tokens " << n_tokens << " at (" << r
                << ", " << t << "): " << got << " vs " << want;
          }
          for (int64_t r = n_rows; r < ys; ++r) ASSERT_EQ(y[t * ys + r], -7.0f) << "wrote past the rows";
        }
      }
    }
  }
}

// BatchGemm (activations prepared once per product, in groups of 16 tokens) computes what gemm
// computes from the same activations converted to vec_dot_type rows, bit for bit, for every
// format and ISA that has one.
TEST(BatchGemm, EqualsGemmOnTheSameActivations) {
  int checked = 0;
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Amx}) {
    if (!cpu_supports(isa)) continue;
    for (DType type : {DType::F16, DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
      const auto& k = kernels(type, isa);
      for (const bool repacked : {false, true}) {
        const BatchGemm& b = repacked ? k.batch_repacked : k.batch;
        if (b.gemm == nullptr) continue;
        const GemmFn gemm = repacked ? k.gemm_repacked : k.gemm;
        const DType xt = format_info(type).vec_dot_type;
        std::mt19937 rng(5);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        for (const int64_t n : {32, 576, 1536}) {
          ASSERT_GT(b.group_bytes(n), 0u);
          for (const int64_t n_rows : {16, 24, 48}) {
            for (const int64_t n_tokens : {16, 17, 40}) {
              const size_t ws = row_bytes(type, n);
              std::vector<uint8_t> w(ws * n_rows);
              std::vector<float> tmp(n), x(n_tokens * (n + 3));
              for (int64_t r = 0; r < n_rows; ++r) {
                for (float& v : tmp) v = dist(rng);
                kernels(type, Isa::Scalar).quantize_row_ref(tmp.data(), w.data() + r * ws, n);
              }
              for (float& v : x) v = dist(rng);
              const int64_t x_stride = n + 3;
              const size_t xs = row_bytes(xt, n);
              std::vector<uint8_t> xq(xs * n_tokens);
              for (int64_t t = 0; t < n_tokens; ++t) {
                kernels(xt, isa).quantize_row(x.data() + t * x_stride, xq.data() + t * xs, n);
              }
              const size_t gb = b.group_bytes(n);
              const int64_t n_groups = (n_tokens + kBatchGroup - 1) / kBatchGroup;
              std::vector<uint8_t> groups(gb * n_groups);
              for (int64_t g = 0; g < n_groups; ++g) {
                b.prepare(x.data() + g * kBatchGroup * x_stride, x_stride, n,
                          std::min(kBatchGroup, n_tokens - g * kBatchGroup), groups.data() + g * gb);
              }
              std::vector<float> want(n_tokens * n_rows), got(n_tokens * n_rows, -7.0f);
              gemm(n, w.data(), ws, n_rows, xq.data(), xs, n_tokens, want.data(), n_rows);
              b.gemm(n, w.data(), ws, n_rows, groups.data(), gb, n_tokens, got.data(), n_rows);
              ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
                  << format_info(type).name << " " << isa_name(isa) << " n " << n << " rows "
                  << n_rows << " tokens " << n_tokens;
              ++checked;
            }
          }
        }
      }
    }
  }
  if (cpu_has_amx()) {
    EXPECT_GT(checked, 0) << "the AMX tier has batch kernels";
  }
  if (checked == 0) GTEST_SKIP() << "no ISA of this CPU has batch kernels";
}

INSTANTIATE_TEST_SUITE_P(Formats, Gemm,
                         ::testing::Values(Case{DType::Q4_0, false}, Case{DType::Q4_0, true},
                                           Case{DType::Q4_1, false}, Case{DType::Q5_0, false},
                                           Case{DType::Q8_0, false},
                                           Case{DType::F16, false, false},
                                           Case{DType::Q4_0, true, true, Isa::Avx512},
                                           Case{DType::Q4_0, true, true, Isa::Avx512, true},
                                           Case{DType::Q4_0, true, true, Isa::Amx, true},
                                           Case{DType::Q8_0, true, true, Isa::Avx512},
                                           Case{DType::Q8_0, true, true, Isa::Avx512, true},
                                           Case{DType::Q8_0, true, true, Isa::Amx},
                                           Case{DType::Q8_0, true, true, Isa::Amx, true},
                                           Case{DType::Q4_1, false, true, Isa::Avx512},
                                           Case{DType::Q5_0, false, true, Isa::Avx512},
                                           Case{DType::Q8_0, false, true, Isa::Avx512},
                                           Case{DType::F16, false, false, Isa::Avx512},
                                           Case{DType::F16, false, false, Isa::Avx512, true},
                                           Case{DType::F16, false, false, Isa::Amx, true},
                                           Case{DType::SQ2_G32, false}, Case{DType::SQ2_G64, false},
                                           Case{DType::SQ2_G128, false}, Case{DType::SQ3_G32, false},
                                           Case{DType::SQ3_G64, false}, Case{DType::SQ3_G128, false},
                                           Case{DType::SQ4_G32, false}, Case{DType::SQ4_G64, false},
                                           Case{DType::SQ4_G128, false},
                                           Case{DType::SQ2_G32, false, true, Isa::Avx512},
                                           Case{DType::SQ2_G64, false, true, Isa::Avx512},
                                           Case{DType::SQ2_G128, false, true, Isa::Avx512},
                                           Case{DType::SQ3_G32, false, true, Isa::Avx512},
                                           Case{DType::SQ3_G64, false, true, Isa::Avx512},
                                           Case{DType::SQ3_G128, false, true, Isa::Avx512},
                                           Case{DType::SQ4_G32, false, true, Isa::Avx512},
                                           Case{DType::SQ4_G64, false, true, Isa::Avx512},
                                           Case{DType::SQ4_G128, false, true, Isa::Avx512}),
                         [](const auto& info) {
                           return std::string(format_info(info.param.type).name) +
                                  (info.param.repacked ? "_repacked_" : "_") +
                                  std::string(isa_name(info.param.isa)) +
                                  (info.param.tiles_of_16 ? "_tiles16" : "");
                         });

}  // namespace
}  // namespace squeeze::formats::test
