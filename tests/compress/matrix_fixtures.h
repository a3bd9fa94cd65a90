// Test matrices for the compression tests: weights with outliers, Hessians of correlated
// inputs, the output loss a changed matrix makes, decoding of a stored matrix.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "formats/format.h"

namespace squeeze::compress {

inline std::vector<float> dequant(formats::DType t, const std::vector<uint8_t>& bytes, int64_t rows,
                                  int64_t cols) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  const size_t rb = formats::row_bytes(t, cols);
  for (int64_t r = 0; r < rows; ++r) {
    formats::kernels(t, Isa::Scalar)
        .dequantize_row(bytes.data() + r * rb, w.data() + r * cols, cols);
  }
  return w;
}

inline std::vector<float> random_weights(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(n));
  for (float& v : w) v = nd(rng);
  // A few outliers, as real weights have.
  for (int64_t i = 0; i < n; i += 97) w[i] *= 6.0f;
  return w;
}

// X: [n_tokens, cols] inputs with strongly correlated channels (a low-rank mix plus noise and
// per-channel scales), as layer inputs are; returns H = Xᵀ X.
inline std::vector<double> correlated_hessian(int64_t cols, int64_t n_tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  const int64_t rank = 8;
  std::vector<double> mix(static_cast<size_t>(rank * cols)), scale(cols);
  for (double& v : mix) v = nd(rng);
  for (double& s : scale) s = std::exp(nd(rng));
  std::vector<double> h(static_cast<size_t>(cols * cols), 0.0), x(cols), z(rank);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (double& v : z) v = nd(rng);
    for (int64_t c = 0; c < cols; ++c) {
      double v = 0.3 * nd(rng);
      for (int64_t k = 0; k < rank; ++k) v += z[k] * mix[k * cols + c];
      x[c] = v * scale[c];
    }
    for (int64_t i = 0; i < cols; ++i) {
      for (int64_t j = 0; j < cols; ++j) h[i * cols + j] += x[i] * x[j];
    }
  }
  return h;
}

// tr((W - Ŵ) H (W - Ŵ)ᵀ) computed directly.
inline double output_loss(const std::vector<float>& w, const std::vector<float>& wq,
                   const std::vector<double>& h, int64_t rows, int64_t cols) {
  double loss = 0.0;
  std::vector<double> d(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) d[c] = static_cast<double>(w[r * cols + c]) - wq[r * cols + c];
    for (int64_t i = 0; i < cols; ++i) {
      double s = 0.0;
      for (int64_t j = 0; j < cols; ++j) s += h[i * cols + j] * d[j];
      loss += d[i] * s;
    }
  }
  return loss;
}

}  // namespace squeeze::compress
