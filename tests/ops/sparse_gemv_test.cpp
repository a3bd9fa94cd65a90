// Sparse matrix-vector products (ops/sparse_gemv.h): the column layout against the row-major
// weights it came from, the scalar kernel against a double-precision sum, the SIMD kernels
// against the scalar one (bit for bit for the integer Q4 kernels), and all against the dense
// product ops::matmul (for Q4: up to float summation order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/blocks.h"
#include "ops/matmul.h"
#include "ops/sparse_gemv.h"
#include "random.h"

namespace squeeze::ops {
namespace {

using formats::DType;
using testing::randn;

constexpr int64_t kRowCounts[] = {32, 96, 192, 576, 1536};  // every Q4 tile kind
constexpr int64_t kColCounts[] = {64, 576, 1536};
constexpr double kDensities[] = {0.0, 0.1, 0.5, 1.0};

// A row-major matrix quantized with its format's quantize_row, its decoded values and its
// column layout.
struct Matrix {
  DType type;
  int64_t n_rows, n_cols;
  std::vector<uint8_t> bytes;  // [n_rows, row_bytes]
  WeightView view;
  std::vector<float> w;        // [n_rows, n_cols] decoded
  ColumnWeights columns;
};

Matrix make_matrix(DType type, int64_t n_rows, int64_t n_cols, uint32_t seed) {
  Matrix m{type, n_rows, n_cols, {}, {}, {}, {}};
  const auto& k = formats::kernels(type, Isa::Scalar);
  const size_t rb = formats::row_bytes(type, n_cols);
  // Rows of different magnitudes, and a positive offset in some, so Q4_1's mins matter.
  auto wf = randn(static_cast<size_t>(n_rows * n_cols), seed, 0.05f);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t c = 0; c < n_cols; ++c) {
      float& v = wf[r * n_cols + c];
      v = v * static_cast<float>(1 + r % 3) + (r % 5 == 0 ? 0.03f : 0.0f);
    }
  }
  m.bytes.resize(rb * n_rows);
  for (int64_t r = 0; r < n_rows; ++r) {
    k.quantize_row(wf.data() + r * n_cols, m.bytes.data() + r * rb, n_cols);
  }
  m.view = WeightView{type, n_cols, n_rows, rb, m.bytes.data()};
  m.w.resize(n_rows * n_cols);
  for (int64_t r = 0; r < n_rows; ++r) {
    k.dequantize_row(m.view.row(r), m.w.data() + r * n_cols, n_cols);
  }
  m.columns = to_column_layout(m.view);
  return m;
}

// Random activations with round((1 - density) * n) of them set to exact zeros (some -0.0).
std::vector<float> sparse_x(int64_t n, double density, uint32_t seed) {
  auto x = randn(static_cast<size_t>(n), seed);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(seed + 1);
  std::shuffle(order.begin(), order.end(), rng);
  const auto n_zero = static_cast<int64_t>(std::llround((1.0 - density) * static_cast<double>(n)));
  for (int64_t i = 0; i < n_zero; ++i) x[order[i]] = i % 7 == 0 ? -0.0f : 0.0f;
  return x;
}

std::vector<int32_t> active_of(const std::vector<float>& x) {
  std::vector<int32_t> idx(x.size());
  idx.resize(nonzero_indices_scalar(x.data(), static_cast<int64_t>(x.size()), idx.data()));
  return idx;
}

// The magnitude float rounding is measured against: max_c |W[r, c]| * sum_c |x[c]|.
std::vector<double> magnitudes(const Matrix& m, const std::vector<float>& x) {
  double sx = 0;
  for (float v : x) sx += std::fabs(v);
  std::vector<double> mag(m.n_rows);
  for (int64_t r = 0; r < m.n_rows; ++r) {
    double wmax = 0;
    for (int64_t c = 0; c < m.n_cols; ++c) {
      wmax = std::max(wmax, double(std::fabs(m.w[r * m.n_cols + c])));
    }
    mag[r] = wmax * sx;
  }
  return mag;
}

bool is_q4(DType t) { return t == DType::Q4_0 || t == DType::Q4_1; }

SparseInput prepare(const std::vector<float>& x, const std::vector<int32_t>& idx) {
  SparseInput in;
  prepare_sparse_input(x.data(), idx.data(), static_cast<int64_t>(idx.size()),
                       static_cast<int64_t>(x.size()), in);
  return in;
}

std::vector<float> run(SparseGemvFn fn, const Matrix& m, const std::vector<float>& x,
                       const std::vector<int32_t>& idx) {
  const SparseInput in = prepare(x, idx);
  std::vector<float> y(m.n_rows), scratch(m.n_rows);
  fn(m.columns, in, 0, static_cast<int64_t>(in.blocks.size()), 0, m.n_rows, y.data(),
     scratch.data());
  return y;
}

// The Q4 products' definition (sparse_gemv.h) in double, from the row-major blocks and the
// dense path's own Q8_1 quantization of x.
std::vector<double> q4_reference(const Matrix& m, const std::vector<float>& x) {
  const auto& xk = formats::kernels(DType::Q8_1, Isa::Scalar);
  std::vector<formats::BlockQ8_1> xq(m.n_cols / 32);
  xk.quantize_row(x.data(), xq.data(), m.n_cols);
  std::vector<double> y(m.n_rows, 0.0);
  for (int64_t r = 0; r < m.n_rows; ++r) {
    for (int64_t b = 0; b < m.n_cols / 32; ++b) {
      double d = 0, mn = 0;
      const uint8_t* qs = nullptr;
      if (m.type == DType::Q4_0) {
        const auto& blk = reinterpret_cast<const formats::BlockQ4_0*>(m.view.row(r))[b];
        d = f16_to_f32(blk.d);
        qs = blk.qs;
      } else {
        const auto& blk = reinterpret_cast<const formats::BlockQ4_1*>(m.view.row(r))[b];
        d = f16_to_f32(blk.d);
        mn = f16_to_f32(blk.m);
        qs = blk.qs;
      }
      int64_t sum = 0;
      for (int j = 0; j < 32; ++j) {
        const int q = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
        sum += (m.type == DType::Q4_0 ? q - 8 : q) * xq[b].qs[j];
      }
      y[r] += d * f16_to_f32(xq[b].d) * double(sum);
      if (m.type == DType::Q4_1) y[r] += mn * f16_to_f32(xq[b].s);
    }
  }
  return y;
}

std::string name_of(DType t) { return std::string(formats::format_info(t).name); }

class SparseGemvTest : public ::testing::TestWithParam<DType> {
 protected:
  // Calls body(matrix, x, idx) on every shape and density.
  template <typename F>
  void for_each_case(F&& body) {
    uint32_t seed = 100;
    for (int64_t n_rows : kRowCounts) {
      for (int64_t n_cols : kColCounts) {
        const Matrix m = make_matrix(GetParam(), n_rows, n_cols, ++seed);
        for (double density : kDensities) {
          SCOPED_TRACE(name_of(GetParam()) + " [" + std::to_string(n_rows) + " x " +
                       std::to_string(n_cols) + "] density " + std::to_string(density));
          const auto x = sparse_x(n_cols, density, ++seed);
          body(m, x, active_of(x));
          if (HasFatalFailure()) return;
        }
      }
    }
  }

  // Calls body(x, idx, in, pool, scratch) for an input of n_cols at every density (seeded), the
  // input prepared once, on a fresh pool of each thread count.
  template <typename F>
  void for_inputs_and_threads(int64_t n_cols, uint32_t seed, std::initializer_list<int> threads,
                              F&& body) {
    for (double density : kDensities) {
      const auto x = sparse_x(n_cols, density, seed);
      const auto idx = active_of(x);
      const SparseInput in = prepare(x, idx);
      for (int t : threads) {
        SCOPED_TRACE(std::to_string(t) + " threads, density " + std::to_string(density));
        ThreadPool pool(t);
        SparseScratch scratch;
        body(x, idx, in, pool, scratch);
        if (HasFatalFailure()) return;
      }
    }
  }
};

// (a) Every weight read back from the layout is the row-major one, bit for bit.
TEST_P(SparseGemvTest, ColumnLayoutIsLossless) {
  for (int64_t n_rows : kRowCounts) {
    for (int64_t n_cols : kColCounts) {
      const Matrix m = make_matrix(GetParam(), n_rows, n_cols, 7);
      ASSERT_EQ(m.columns.n_rows, n_rows);
      ASSERT_EQ(m.columns.n_cols, n_cols);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(m.columns.data) % 64, 0u);
      // Same size as the row-major matrix: every block's scales and codes, nothing else.
      ASSERT_EQ(m.columns.bytes(), m.bytes.size());
      for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t c = 0; c < n_cols; ++c) {
          const float want = m.w[r * n_cols + c], got = m.columns.weight(r, c);
          ASSERT_EQ(std::memcmp(&want, &got, sizeof want), 0)
              << name_of(GetParam()) << " W[" << r << ", " << c << "] = " << want << ", layout "
              << got << " (" << n_rows << " x " << n_cols << ")";
        }
      }
    }
  }
}

// (b) The scalar kernel is the plain sum over the active inputs (Q4: over the dense path's
// quantized x), up to float rounding.
TEST_P(SparseGemvTest, ScalarEqualsDoubleReference) {
  for_each_case([](const Matrix& m, const std::vector<float>& x, const std::vector<int32_t>& idx) {
    const auto y = run(sparse_gemv_scalar, m, x, idx);
    const auto mag = magnitudes(m, x);
    const auto q4 = is_q4(m.type) ? q4_reference(m, x) : std::vector<double>();
    for (int64_t r = 0; r < m.n_rows; ++r) {
      double ref = 0;
      if (is_q4(m.type)) {
        ref = q4[r];
      } else {
        for (int32_t c : idx) ref += double(m.w[r * m.n_cols + c]) * double(x[c]);
      }
      // Float sums of at most 1536 terms (the worst seen here: 2e-7 of the magnitude).
      ASSERT_NEAR(y[r], ref, 1e-6 * mag[r] + 1e-30) << "row " << r;
    }
  });
}

// The SIMD kernels this CPU can run.
std::vector<std::pair<const char*, SparseGemvFn>> simd_kernels() {
  std::vector<std::pair<const char*, SparseGemvFn>> k;
  if (cpu_has_avx2()) k.emplace_back("avx2", sparse_gemv_avx2);
  if (cpu_has_avx512()) k.emplace_back("avx512", sparse_gemv_avx512);
  return k;
}

// (c) The SIMD twins sum in the scalar order; only their fused multiply-adds round differently.
// The Q4 kernels are integer sums folded with the same float operations: equal bit for bit.
TEST_P(SparseGemvTest, SimdEqualsScalar) {
  if (simd_kernels().empty()) GTEST_SKIP() << "no AVX2";
  for_each_case([](const Matrix& m, const std::vector<float>& x, const std::vector<int32_t>& idx) {
    const auto want = run(sparse_gemv_scalar, m, x, idx);
    const auto mag = magnitudes(m, x);
    for (const auto& [name, fn] : simd_kernels()) {
      const auto got = run(fn, m, x, idx);
      for (int64_t r = 0; r < m.n_rows; ++r) {
        if (is_q4(m.type)) {
          ASSERT_EQ(got[r], want[r]) << name << " row " << r;
          continue;
        }
        // The worst seen here: 2e-7 of the magnitude.
        ASSERT_NEAR(got[r], want[r], 1e-6 * mag[r] + 1e-30) << name << " row " << r;
      }
    }
  });
}

// (d) Sparse and dense products of the same zeroed input agree. The dense one (ops::matmul)
// first converts x to the weight format's vec_dot_type: f16 for F16, Q8_0 (8-bit codes, one
// half scale per 32) for Q8_0 and Q4_0, Q8_1 for Q4_1 (whose min term also uses the block sum
// s rounded to a half). For F16 and Q8_0 (float sparse kernels) the two differ by at most
// sum_c |W[r,c]| * |x[c] - x8[c]| (x8: x rounded that way), plus float rounding. The Q4 kernels
// use the dense path's quantized x themselves, so they differ by float rounding only.
TEST_P(SparseGemvTest, EqualsDenseMatmulUpToActivationRounding) {
  ThreadPool pool(2);
  MatmulScratch mm;
  for_each_case([&](const Matrix& m, const std::vector<float>& x, const std::vector<int32_t>& idx) {
    const auto y = run(sparse_gemv_kernel(active_isa()), m, x, idx);
    std::vector<float> dense(m.n_rows);
    matmul(m.view, x.data(), 1, m.n_cols, dense.data(), m.n_rows, pool, mm);

    const DType xt = formats::format_info(m.type).vec_dot_type;
    const auto& xk = formats::kernels(xt, Isa::Scalar);
    std::vector<uint8_t> xq(formats::row_bytes(xt, m.n_cols));
    std::vector<float> x8(m.n_cols);
    xk.quantize_row(x.data(), xq.data(), m.n_cols);
    xk.dequantize_row(xq.data(), x8.data(), m.n_cols);
    const auto mag = magnitudes(m, x);
    for (int64_t r = 0; r < m.n_rows; ++r) {
      if (is_q4(m.type)) {
        // The worst seen here: 3e-7 of the magnitude.
        ASSERT_NEAR(y[r], dense[r], 1e-6 * mag[r] + 1e-30) << "row " << r;
        continue;
      }
      double bound = 1e-6 * mag[r];
      for (int64_t c = 0; c < m.n_cols; ++c) {
        bound += std::fabs(double(m.w[r * m.n_cols + c])) * std::fabs(double(x[c]) - x8[c]);
      }
      ASSERT_NEAR(y[r], dense[r], bound) << "row " << r;
    }
  });
}

// (e) A row slice writes its rows only, with the values of the full product. Q4 slices start
// and end on row tiles (multiples of 128, or n_rows); 352 rows = tiles of 128, 128, 64, 32.
TEST_P(SparseGemvTest, RowSlicesWriteOnlyTheirRows) {
  const Matrix m = make_matrix(GetParam(), 352, 576, 11);
  const auto x = sparse_x(576, 0.5, 12);
  const auto idx = active_of(x);
  const SparseInput in = prepare(x, idx);
  const auto n_kb = static_cast<int64_t>(in.blocks.size());
  std::vector<std::pair<const char*, SparseGemvFn>> kernels = simd_kernels();
  kernels.emplace_back("scalar", sparse_gemv_scalar);
  std::vector<std::pair<int64_t, int64_t>> slices = {{0, 128}, {128, 352}, {256, 352}, {128, 128}};
  if (!is_q4(GetParam())) slices.insert(slices.end(), {{0, 32}, {32, 96}, {320, 352}});
  for (const auto& [name, fn] : kernels) {
    const auto full = run(fn, m, x, idx);
    for (auto [r0, r1] : slices) {
      std::vector<float> y(m.n_rows, -123.0f), scratch(r1 - r0 + 1);
      fn(m.columns, in, 0, n_kb, r0, r1, y.data(), scratch.data());
      for (int64_t r = 0; r < m.n_rows; ++r) {
        const float want = r >= r0 && r < r1 ? full[r] : -123.0f;
        ASSERT_EQ(y[r], want) << name << " slice [" << r0 << ", " << r1 << ") row " << r;
      }
    }
  }
}

// The threaded driver: on one thread the kernel's values; on more, each thread sums a run of
// whole blocks and the partial sums are added, so the values differ by float rounding only.
TEST_P(SparseGemvTest, ThreadedDriverEqualsKernel) {
  for (int64_t n_rows : {32, 576}) {
    const Matrix m = make_matrix(GetParam(), n_rows, 1536, 13);
    for (double density : kDensities) {
      const auto x = sparse_x(1536, density, 14);
      const auto idx = active_of(x);
      const int64_t n_active = static_cast<int64_t>(idx.size());
      const auto want = run(sparse_gemv_kernel(active_isa()), m, x, idx);
      const auto mag = magnitudes(m, x);
      for (int threads : {1, 2, 3, 8}) {
        ThreadPool pool(threads);
        SparseScratch scratch;
        std::vector<float> y(m.n_rows, -1.0f);
        for (int rep = 0; rep < 2; ++rep) {  // the scratch is reused
          sparse_gemv(m.columns, x.data(), idx.data(), n_active, y.data(), pool, scratch);
          for (int64_t r = 0; r < m.n_rows; ++r) {
            if (threads == 1) {
              ASSERT_EQ(y[r], want[r]) << "row " << r;
            } else {
              ASSERT_NEAR(y[r], want[r], 1e-6 * mag[r] + 1e-30)
                  << threads << " threads, density " << density << ", row " << r;
            }
          }
        }
      }
    }
  }
}

// The grouped entry (one parallel region for several matrices of one input) equals separate
// calls bit for bit, on any number of threads; the prepared and unprepared entries agree.
TEST_P(SparseGemvTest, GroupedEqualsSeparateCalls) {
  const Matrix a = make_matrix(GetParam(), 576, 576, 21);
  const Matrix b = make_matrix(GetParam(), 192, 576, 22);
  const Matrix c = make_matrix(GetParam(), 1536, 576, 23);
  for_inputs_and_threads(576, 24, {1, 2, 3}, [&](const std::vector<float>& x,
                                                 const std::vector<int32_t>& idx,
                                                 const SparseInput& in, ThreadPool& pool,
                                                 SparseScratch& scratch) {
    std::vector<float> ya(a.n_rows), yb(b.n_rows), yc(c.n_rows);
    std::vector<float> ga(a.n_rows, -1.0f), gb(b.n_rows, -1.0f), gc(c.n_rows, -1.0f);
    sparse_gemv(a.columns, in, ya.data(), pool, scratch);
    sparse_gemv(b.columns, x.data(), idx.data(), static_cast<int64_t>(idx.size()), yb.data(),
                pool, scratch);
    sparse_gemv(c.columns, in, yc.data(), pool, scratch);
    for (int rep = 0; rep < 2; ++rep) {
      sparse_gemv({{&a.columns, ga.data()}, {&b.columns, gb.data()}, {&c.columns, gc.data()}},
                  in, pool, scratch);
      ASSERT_EQ(ga, ya);
      ASSERT_EQ(gb, yb);
      ASSERT_EQ(gc, yc);
    }
  });
}

// A matrix of 8192 rows or more (an output head) is split by rows, not by blocks: each row is
// then summed by one kernel call over all blocks, so the values equal the kernel's bit for bit
// on any number of threads, alone or grouped with a block-split matrix. 8352 rows: slices of
// 1792 and a last one of 1184 (not a whole Q4 tile count of 128: it ends at n_rows).
TEST_P(SparseGemvTest, TallMatricesSplitByRowsEqualTheKernel) {
  const Matrix tall = make_matrix(GetParam(), 8352, 64, 31);
  const Matrix small = make_matrix(GetParam(), 192, 64, 32);
  for_inputs_and_threads(64, 33, {1, 2, 3}, [&](const std::vector<float>& x,
                                                const std::vector<int32_t>& idx,
                                                const SparseInput& in, ThreadPool& pool,
                                                SparseScratch& scratch) {
    const auto want = run(sparse_gemv_kernel(active_isa()), tall, x, idx);
    std::vector<float> y(tall.n_rows, -1.0f), ys(small.n_rows, -1.0f);
    sparse_gemv(tall.columns, in, y.data(), pool, scratch);
    ASSERT_EQ(y, want);
    std::fill(y.begin(), y.end(), -1.0f);
    sparse_gemv({{&small.columns, ys.data()}, {&tall.columns, y.data()}}, in, pool, scratch);
    ASSERT_EQ(y, want) << "grouped";
    if (pool.size() == 1) {
      ASSERT_EQ(ys, run(sparse_gemv_kernel(active_isa()), small, x, idx)) << "grouped";
    }
  });
}

// The integer Q4 products split by rows from 3072 rows on (SmolLM2's stacked gate/up), in
// slices of 768: bit for bit the kernel's values on any number of threads. 3136 rows: four
// slices of 768 and a last one of 64. The float types split the blocks at this size (their
// partial sums are added in another order: equal to a float tolerance).
TEST_P(SparseGemvTest, Q4MatricesFrom3072RowsSplitByRows) {
  const Matrix m = make_matrix(GetParam(), 3136, 576, 41);
  for_inputs_and_threads(576, 42, {1, 2, 3}, [&](const std::vector<float>& x,
                                                 const std::vector<int32_t>& idx,
                                                 const SparseInput& in, ThreadPool& pool,
                                                 SparseScratch& scratch) {
    const auto want = run(sparse_gemv_kernel(active_isa()), m, x, idx);
    std::vector<float> y(m.n_rows, -1.0f);
    sparse_gemv(m.columns, in, y.data(), pool, scratch);
    if (is_q4(GetParam())) {
      ASSERT_EQ(y, want);
      return;
    }
    for (int64_t r = 0; r < m.n_rows; ++r) {
      ASSERT_NEAR(y[r], want[r], 1e-4f * (1.0f + std::fabs(want[r]))) << "row " << r;
    }
  });
}

// Matrices of one input stacked by rows into one layout (how the model runs q/k/v and gate/up)
// give each matrix's own values bit for bit: the threads cut the same blocks of the same input.
TEST_P(SparseGemvTest, StackedRowsEqualTheSeparateProducts) {
  const Matrix a = make_matrix(GetParam(), 576, 576, 51);
  const Matrix b = make_matrix(GetParam(), 192, 576, 52);
  std::vector<uint8_t> stacked(a.bytes);
  stacked.insert(stacked.end(), b.bytes.begin(), b.bytes.end());
  WeightView sv = a.view;
  sv.n_rows = a.n_rows + b.n_rows;
  sv.data = stacked.data();
  const ColumnWeights both = to_column_layout(sv);
  for_inputs_and_threads(576, 53, {1, 2, 3}, [&](const std::vector<float>&,
                                                 const std::vector<int32_t>&,
                                                 const SparseInput& in, ThreadPool& pool,
                                                 SparseScratch& scratch) {
    std::vector<float> ya(a.n_rows), yb(b.n_rows), y(sv.n_rows);
    sparse_gemv({{&a.columns, ya.data()}, {&b.columns, yb.data()}}, in, pool, scratch);
    sparse_gemv(both, in, y.data(), pool, scratch);
    ASSERT_EQ(std::vector<float>(y.begin(), y.begin() + a.n_rows), ya);
    ASSERT_EQ(std::vector<float>(y.begin() + a.n_rows, y.end()), yb);
  });
}

INSTANTIATE_TEST_SUITE_P(SparseGemv, SparseGemvTest,
                         ::testing::Values(DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1),
                         [](const auto& info) { return name_of(info.param); });

// (f) Shapes and formats without a column layout are refused.
// An input prepared by ranges of columns (threads that own parts of x): each range's blocks,
// codes and scales are the whole input's for that range, and the products of the ranges add up
// to the whole input's product (up to the order of the float sums).
TEST_P(SparseGemvTest, RangesOfTheInputAddUpToTheWhole) {
  const Matrix m = make_matrix(GetParam(), 576, 1536, 61);
  const SparseGemvFn kernel = sparse_gemv_kernel(active_isa());
  for (double density : kDensities) {
    SCOPED_TRACE("density " + std::to_string(density));
    const auto x = sparse_x(1536, density, 62);
    const auto idx = active_of(x);
    const SparseInput whole = prepare(x, idx);
    const auto want = run(kernel, m, x, idx);
    const auto mag = magnitudes(m, x);
    std::vector<double> sum(m.n_rows, 0.0);
    for (auto [c0, c1] : {std::pair<int64_t, int64_t>{0, 768}, {768, 1024}, {1024, 1536}}) {
      std::vector<int32_t> part;
      for (int32_t i : idx) {
        if (i >= c0 && i < c1) part.push_back(i);
      }
      SparseInput in;
      prepare_sparse_input_range(x.data(), part.data(), static_cast<int64_t>(part.size()), 1536,
                                 c0, c1, in);
      ASSERT_EQ(in.n_active, static_cast<int64_t>(part.size()));
      std::vector<int32_t> want_blocks;
      for (int32_t b : whole.blocks) {
        if (b * 32 >= c0 && b * 32 < c1) want_blocks.push_back(b);
      }
      ASSERT_EQ(in.blocks, want_blocks) << "[" << c0 << ", " << c1 << ")";
      for (int32_t b : in.blocks) {
        ASSERT_EQ(in.scale[b], whole.scale[b]);
        ASSERT_EQ(in.qsum[b], whole.qsum[b]);
        ASSERT_EQ(in.qsum_s[b], whole.qsum_s[b]);
        for (int j = 0; j < 32; ++j) ASSERT_EQ(in.xq[b * 32 + j], whole.xq[b * 32 + j]);
      }
      std::vector<float> y(m.n_rows), scratch(m.n_rows);
      kernel(m.columns, in, 0, static_cast<int64_t>(in.blocks.size()), 0, m.n_rows, y.data(),
             scratch.data());
      for (int64_t r = 0; r < m.n_rows; ++r) sum[r] += y[r];
    }
    for (int64_t r = 0; r < m.n_rows; ++r) {
      ASSERT_NEAR(sum[r], want[r], 1e-6 * mag[r] + 1e-30) << "row " << r;
    }
  }
}

TEST(SparseGemvLayout, RangesMustBeWholeBlocks) {
  const std::vector<float> x(96, 1.0f);
  std::vector<int32_t> idx(96);
  std::iota(idx.begin(), idx.end(), 0);
  SparseInput in;
  EXPECT_THROW(prepare_sparse_input_range(x.data(), idx.data(), 16, 96, 16, 32, in), UsageError);
  EXPECT_THROW(prepare_sparse_input_range(x.data(), idx.data(), 16, 96, 0, 48, in), UsageError);
  EXPECT_THROW(prepare_sparse_input_range(x.data(), idx.data(), 16, 96, 64, 32, in), UsageError);
  EXPECT_THROW(prepare_sparse_input_range(x.data(), idx.data(), 16, 96, 0, 128, in), UsageError);
  EXPECT_NO_THROW(prepare_sparse_input_range(x.data(), idx.data() + 32, 32, 96, 32, 64, in));
  EXPECT_EQ(in.blocks, std::vector<int32_t>{1});
}

TEST(SparseGemvLayout, RejectsBadShapesAndFormats) {
  std::vector<uint8_t> bytes(1 << 16);
  auto view = [&](DType t, int64_t n_rows, int64_t n_cols) {
    const auto& info = formats::format_info(t);
    const auto n_blocks = static_cast<size_t>((n_cols + info.block_size - 1) / info.block_size);
    const size_t rb = n_blocks * info.block_bytes;
    return WeightView{t, n_cols, n_rows, rb, bytes.data()};
  };
  EXPECT_THROW(to_column_layout(view(DType::Q8_0, 48, 64)), FormatError);   // rows % 32
  EXPECT_THROW(to_column_layout(view(DType::F16, 16, 64)), FormatError);
  EXPECT_THROW(to_column_layout(view(DType::Q4_0, 32, 48)), FormatError);   // cols % 32
  EXPECT_THROW(to_column_layout(view(DType::Q4_1, 0, 64)), FormatError);
  EXPECT_THROW(to_column_layout(view(DType::Q5_0, 32, 64)), FormatError);   // no layout
  EXPECT_THROW(to_column_layout(view(DType::F32, 32, 64)), FormatError);
  EXPECT_FALSE(column_layout_supported(DType::Q4_K));
  EXPECT_TRUE(column_layout_supported(DType::Q4_1));
  // F16 has no blocks: any column count.
  const ColumnWeights f16 = to_column_layout(view(DType::F16, 32, 40));
  EXPECT_EQ(f16.bytes(), 32u * 40u * 2u);
  // An empty (default) layout holds nothing and moves.
  ColumnWeights empty;
  EXPECT_EQ(empty.bytes(), 0u);
  ColumnWeights moved = to_column_layout(view(DType::Q8_0, 32, 64));
  empty = std::move(moved);
  EXPECT_EQ(empty.bytes(), 2u * 34u * 32u);
  EXPECT_EQ(moved.data, nullptr);
}

// A product whose input has another column count is refused.
TEST(SparseGemvLayout, RejectsMismatchedInput) {
  std::vector<uint8_t> bytes(32 * 18 * 2, 0);
  const WeightView v{DType::Q4_0, 64, 32, 36, bytes.data()};
  const ColumnWeights w = to_column_layout(v);
  std::vector<float> x(96, 1.0f), y(32);
  std::vector<int32_t> idx(96);
  std::iota(idx.begin(), idx.end(), 0);
  ThreadPool pool(1);
  SparseScratch scratch;
  SparseInput in;
  prepare_sparse_input(x.data(), idx.data(), 96, 96, in);  // 96 columns, the matrix has 64
  EXPECT_THROW(sparse_gemv(w, in, y.data(), pool, scratch), UsageError);
  EXPECT_THROW(sparse_gemv({{&w, y.data()}}, in, pool, scratch), UsageError);
  prepare_sparse_input(x.data(), idx.data(), 40, 40, in);  // 40 columns: not quantized
  EXPECT_FALSE(in.quantized);
  EXPECT_THROW(sparse_gemv(w, in, y.data(), pool, scratch), UsageError);
  prepare_sparse_input(x.data(), idx.data(), 64, 64, in, /*for_q4=*/false);
  EXPECT_FALSE(in.quantized);
  EXPECT_THROW(sparse_gemv(w, in, y.data(), pool, scratch), UsageError);
}

// F16 and Q8_0 products read x itself: an input prepared without the Q4 quantization gives the
// same values, bit for bit.
TEST(SparseGemvLayout, FloatProductsNeedNoQ4Input) {
  for (DType t : {DType::F16, DType::Q8_0}) {
    const Matrix m = make_matrix(t, 576, 1536, 41);
    const auto x = sparse_x(1536, 0.5, 42);
    const auto idx = active_of(x);
    ThreadPool pool(2);
    SparseScratch scratch;
    SparseInput a, b;
    prepare_sparse_input(x.data(), idx.data(), static_cast<int64_t>(idx.size()), 1536, a);
    prepare_sparse_input(x.data(), idx.data(), static_cast<int64_t>(idx.size()), 1536, b, false);
    EXPECT_TRUE(a.quantized);
    EXPECT_FALSE(b.quantized);
    EXPECT_TRUE(b.quads.empty());
    EXPECT_FALSE(needs_q4_input(m.columns));
    std::vector<float> ya(576), yb(576);
    sparse_gemv(m.columns, a, ya.data(), pool, scratch);
    sparse_gemv(m.columns, b, yb.data(), pool, scratch);
    EXPECT_EQ(ya, yb) << name_of(t);
  }
}

// The grouping step of prepare_sparse_input: the AVX2 twin (from the non-zero x) gives the
// scalar one's blocks, index ranges and quads (positions, codes, padding) exactly, and refuses
// an input whose count of non-zero entries is not the one given.
TEST(SparseGemvIndices, GroupBlocksTwinsAgree) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(77);
  std::uniform_int_distribution<int> code(-128, 127);
  for (int64_t n_cols : {32, 64, 576, 1536}) {
    for (double density : {0.0, 0.02, 0.3, 0.5, 0.9, 1.0}) {
      const auto x = sparse_x(n_cols, density, static_cast<uint32_t>(n_cols + density * 100));
      std::vector<int32_t> idx(n_cols);
      idx.resize(nonzero_indices_scalar(x.data(), n_cols, idx.data()));
      const auto n_active = static_cast<int64_t>(idx.size());
      std::vector<int8_t> xq(n_cols);
      for (auto& v : xq) v = static_cast<int8_t>(code(rng));
      for (bool with_quads : {false, true}) {
        const size_t nb = static_cast<size_t>(n_cols / 32 + 2);
        const size_t nq = static_cast<size_t>(n_active / 4 + n_cols / 32 + 1 + kGroupSlack);
        std::vector<int32_t> blocks[2], first[2], quad[2];
        std::vector<SparseQuad> quads[2];
        SparseGroups g[2];
        for (int t = 0; t < 2; ++t) {
          blocks[t].assign(nb, -1), first[t].assign(nb, -1), quad[t].assign(nb, -1);
          quads[t].assign(nq, SparseQuad{{0, 0, 0, 0}, 0});
          g[t] = {blocks[t].data(), first[t].data(), quad[t].data(),
                  with_quads ? quads[t].data() : nullptr, 0, 0};
        }
        group_blocks_scalar(idx.data(), n_active, xq.data(), g[0]);
        ASSERT_TRUE(group_blocks_avx2(x.data(), n_cols, n_active, xq.data(), g[1]));
        const std::string at = std::to_string(n_cols) + " at " + std::to_string(density);
        ASSERT_EQ(g[0].n_blocks, g[1].n_blocks) << at;
        ASSERT_EQ(g[0].n_quads, g[1].n_quads) << at;
        for (int64_t b = 0; b <= g[0].n_blocks; ++b) {
          if (b < g[0].n_blocks) {
            ASSERT_EQ(blocks[0][b], blocks[1][b]) << at;
          }
          ASSERT_EQ(first[0][b], first[1][b]) << at;
          ASSERT_EQ(quad[0][b], quad[1][b]) << at;
        }
        for (int64_t q = 0; with_quads && q < g[0].n_quads; ++q) {
          ASSERT_EQ(0, std::memcmp(quads[0][q].j, quads[1][q].j, 4)) << at << " quad " << q;
          ASSERT_EQ(quads[0][q].xq4, quads[1][q].xq4) << at << " quad " << q;
        }
        if (n_active > 0) {
          SparseGroups wrong = g[1];
          EXPECT_FALSE(group_blocks_avx2(x.data(), n_cols, n_active - 1, xq.data(), wrong));
          EXPECT_FALSE(group_blocks_avx2(x.data(), n_cols, n_active + 1, xq.data(), wrong));
        }
      }
    }
  }
}

// The indices of the non-zero inputs: every twin gives the definition's list.
TEST(SparseGemvIndices, NonzeroIndicesMatchDefinition) {
  for (int64_t n : {0, 1, 7, 8, 9, 64, 577}) {
    for (double density : {0.0, 0.3, 1.0}) {
      auto x = sparse_x(n, density, static_cast<uint32_t>(n * 10 + density * 10));
      if (n > 3) x[3] = std::nanf("");  // not zero: kept
      std::vector<int32_t> want;
      for (int64_t i = 0; i < n; ++i) {
        if (!(x[i] == 0.0f)) want.push_back(static_cast<int32_t>(i));
      }
      std::vector<int32_t> got(n + 1);
      got.resize(nonzero_indices_scalar(x.data(), n, got.data()));
      EXPECT_EQ(got, want) << "scalar n=" << n;
      got.assign(n + 1, 0);
      got.resize(nonzero_indices(x.data(), n, got.data()));
      EXPECT_EQ(got, want) << "dispatched n=" << n;
      if (cpu_has_avx2()) {
        got.assign(n + 1, 0);
        got.resize(nonzero_indices_avx2(x.data(), n, got.data()));
        EXPECT_EQ(got, want) << "avx2 n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace squeeze::ops
