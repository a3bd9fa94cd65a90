// sparse_gemv_bench: one-token products with sparse inputs (ops::sparse_gemv on the column
// layout) against the dense one-token product (ops::matmul, n_tokens = 1) on the same format,
// for SmolLM2-135M's matrix shapes, at input densities 1, 0.5 and 0.25, on 1 and 2 threads.
//
// Decode streams every weight from DRAM once per token, so each product cycles over enough
// copies of its matrix (at least kMinLayers, and over kMinBytes in all: three times a 32 MiB
// L3) that no copy is still cached when its turn comes. Times are medians over --reps passes
// (after two warm-up passes), per product; dense and sparse passes alternate. The sparse time
// is the product on a prepared input; "prep" (us) is nonzero_indices + prepare_sparse_input,
// once per token input (shared by q, k, v or gate, up). "GB/s" is the bytes each product must read (dense: the matrix; sparse: the scales
// of blocks with an active input and the active inputs' weights) over its time, next to this
// machine's streaming read bandwidth, measured first.
//
//   sparse_gemv_bench [--reps N] [--quick] [--type NAME] [--copies N]
// --quick: Q4_0 only; --type NAME: that format only (f16, q8_0, q4_0, q4_1); --copies N: cycle over N copies instead (1: the matrix stays in cache,
// which shows the kernels' compute speed). SQUEEZE_ISA=avx2|scalar picks the kernels of both.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "formats/format.h"
#include "ops/matmul.h"
#include "ops/sparse_gemv.h"

namespace {

using namespace squeeze;
using formats::DType;

constexpr size_t kMinBytes = size_t{96} << 20;
constexpr int kMinLayers = 30;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Best of a few streaming passes over a buffer much larger than the caches, in GB/s.
double read_bandwidth(ThreadPool& pool) {
  const size_t n = (size_t{512} << 20) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n, 1);
  std::vector<uint64_t> sums(pool.size() * 8, 0);
  double best = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const double t0 = now_s();
    pool.parallel_for(static_cast<int64_t>(n), 1 << 17, [&](int64_t b, int64_t e, int ith) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int64_t i = b; i + 4 <= e; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      sums[ith * 8] += s0 + s1 + s2 + s3;
    });
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / (now_s() - t0) / 1e9);
  }
  if (std::accumulate(sums.begin(), sums.end(), uint64_t{0}) == 0) std::puts("");
  return best;
}

// TEAL's zeroing: the (1 - density) fraction of x with the smallest magnitudes becomes 0.
std::vector<float> zeroed_input(const std::vector<float>& x, double density) {
  std::vector<float> mags(x.size());
  for (size_t i = 0; i < x.size(); ++i) mags[i] = std::fabs(x[i]);
  std::sort(mags.begin(), mags.end());
  const auto n_zero =
      static_cast<size_t>(std::llround((1.0 - density) * static_cast<double>(x.size())));
  std::vector<float> out = x;
  if (n_zero == 0) return out;
  const float t = mags[n_zero - 1];
  size_t zeroed = 0;
  for (float& v : out) {
    if (std::fabs(v) <= t && zeroed < n_zero) {
      v = 0.0f;
      ++zeroed;
    }
  }
  return out;
}

// Bytes a sparse product reads: the scales of every block with an active input, and the
// active inputs' weights.
size_t sparse_bytes(const ops::ColumnWeights& w, const std::vector<int32_t>& idx) {
  size_t bytes = idx.size() * w.column_bytes;
  int64_t last_block = -1;
  for (int32_t c : idx) {
    if (c / w.block_inputs != last_block) bytes += w.header_bytes;
    last_block = c / w.block_inputs;
  }
  return bytes;
}

struct Shape {
  int64_t n_rows, n_cols;
  const char* name;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  bool quick = false;
  int copies = 0;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--copies") == 0 && i + 1 < argc) {
      copies = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--type") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: sparse_gemv_bench [--reps N] [--quick] [--type NAME] [--copies N]\n");
      return 2;
    }
  }
  std::vector<DType> types =
      quick ? std::vector<DType>{DType::Q4_0}
            : std::vector<DType>{DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1};
  if (!only.empty()) {
    std::erase_if(types, [&](DType t) { return formats::format_info(t).name != only; });
    if (types.empty()) {
      std::fprintf(stderr, "sparse_gemv_bench: --type %s: not one of f16, q8_0, q4_0, q4_1\n",
                   only.c_str());
      return 2;
    }
  }
  const std::vector<Shape> shapes = {
      {576, 576, "wq/wo"}, {192, 576, "wk/wv"}, {1536, 576, "gate/up"}, {576, 1536, "down"}};
  const double densities[] = {1.0, 0.5, 0.25};
  const int thread_counts[] = {1, 2};

  ThreadPool pools[2] = {ThreadPool(1), ThreadPool(2)};
  std::printf("isa %s; streaming read: %.1f GB/s (1 thread), %.1f GB/s (2 threads)\n",
              std::string(isa_name(active_isa())).c_str(), read_bandwidth(pools[0]),
              read_bandwidth(pools[1]));
  std::printf("median us per product over %d passes; ratio = dense / sparse\n\n", reps);
  std::printf("%-5s %-8s %-11s %4s %3s | %8s %6s | %8s %6s | %5s | %5s\n", "type", "matrix",
              "shape", "dens", "thr", "dense", "GB/s", "sparse", "GB/s", "ratio", "prep");

  double relayout_us = 0;  // to_column_layout, one matrix of each type and shape
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType type : types) {
    for (const Shape& s : shapes) {
      // One random matrix, copied until the copies exceed the caches.
      const size_t rb = formats::row_bytes(type, s.n_cols);
      std::vector<float> wf(static_cast<size_t>(s.n_rows * s.n_cols));
      for (float& v : wf) v = 0.02f * normal(rng);
      std::vector<uint8_t> base(rb * s.n_rows);
      const auto& k = formats::kernels(type);
      for (int64_t r = 0; r < s.n_rows; ++r) {
        k.quantize_row(wf.data() + r * s.n_cols, base.data() + r * rb, s.n_cols);
      }
      const int n_copies =
          copies > 0 ? copies
                     : std::max<int>(kMinLayers, static_cast<int>(kMinBytes / base.size()) + 1);
      std::vector<std::vector<uint8_t>> rows(n_copies, base);
      std::vector<ops::WeightView> views;
      std::vector<ops::ColumnWeights> cols;
      const double t_layout = now_s();
      for (auto& r : rows) {
        views.push_back({type, s.n_cols, s.n_rows, rb, r.data()});
        cols.push_back(ops::to_column_layout(views.back()));
      }
      relayout_us += (now_s() - t_layout) / n_copies * 1e6;
      std::vector<float> x(s.n_cols);
      for (float& v : x) v = normal(rng);
      std::vector<std::vector<float>> xs;
      for (double d : densities) xs.push_back(zeroed_input(x, d));

      for (int ti = 0; ti < 2; ++ti) {
        ThreadPool& pool = pools[ti];
        ops::MatmulScratch mm;
        ops::SparseScratch ss;
        std::vector<float> y(s.n_rows);
        std::vector<int32_t> idx(s.n_cols);
        std::vector<double> t_dense;
        std::vector<std::vector<double>> t_sparse(std::size(densities));
        std::vector<std::vector<double>> t_prep(std::size(densities));
        ops::SparseInput in;
        // Passes alternate dense and sparse so that both see the same machine load; the first
        // two warm up.
        for (int rep = 0; rep < reps + 2; ++rep) {
          double t0 = now_s();
          for (int c = 0; c < n_copies; ++c) {
            ops::matmul(views[c], x.data(), 1, s.n_cols, y.data(), s.n_rows, pool, mm);
          }
          if (rep >= 2) t_dense.push_back((now_s() - t0) / n_copies);
          for (size_t di = 0; di < std::size(densities); ++di) {
            const float* xd = xs[di].data();
            // The input is prepared once per token (and shared by its q, k, v or gate, up
            // products): timed on its own, per input.
            t0 = now_s();
            for (int c = 0; c < n_copies; ++c) {
              const int64_t n_active = ops::nonzero_indices(xd, s.n_cols, idx.data());
              ops::prepare_sparse_input(xd, idx.data(), n_active, s.n_cols, in,
                                        ops::needs_q4_input(cols[0]));
            }
            if (rep >= 2) t_prep[di].push_back((now_s() - t0) / n_copies);
            t0 = now_s();
            for (int c = 0; c < n_copies; ++c) ops::sparse_gemv(cols[c], in, y.data(), pool, ss);
            if (rep >= 2) t_sparse[di].push_back((now_s() - t0) / n_copies);
          }
        }
        const double dense = median(t_dense);
        for (size_t di = 0; di < std::size(densities); ++di) {
          idx.resize(ops::nonzero_indices(xs[di].data(), s.n_cols, idx.data()));
          const double sparse = median(t_sparse[di]);
          const std::string shape = std::to_string(s.n_rows) + "x" + std::to_string(s.n_cols);
          std::printf("%-5s %-8s %-11s %4.2f %3d | %8.2f %6.1f | %8.2f %6.1f | %5.2f | %5.2f\n",
                      std::string(formats::format_info(type).name).c_str(), s.name, shape.c_str(),
                      densities[di], thread_counts[ti], dense * 1e6, base.size() / dense / 1e9,
                      sparse * 1e6, sparse_bytes(cols[0], idx) / sparse / 1e9, dense / sparse,
                      median(t_prep[di]) * 1e6);
          idx.resize(s.n_cols);
        }
        std::fflush(stdout);
      }
    }
  }
  std::printf("\nto_column_layout: %.0f us for one matrix of each type and shape above\n",
              relayout_us);
  return 0;
}
