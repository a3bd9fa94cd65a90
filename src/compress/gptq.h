// GPTQ (Frantar et al., 2022, "Accurate Post-Training Quantization for Generative
// Pre-trained Transformers"): quantizes a weight matrix column by column and, after each
// column, moves its rounding error onto the columns not yet quantized, weighted by the
// inverse Hessian of the layer's reconstruction loss ||W X - Ŵ X||² (H = X Xᵀ over the
// calibration inputs). As in the paper's reference code: damped Hessian, the upper Cholesky
// factor of its inverse, lazy updates in blocks of 128 columns, group parameters fixed when
// their first column is reached, optional act-order (columns by decreasing diag(H)) with
// static groups (parameters from the original weights, so the groups stay the file's
// contiguous ones and the run time needs no permutation).
//
// Linear algebra: OpenBLAS (sgemm for the block updates) and LAPACK (Cholesky factor and
// inverse, in double precision).
#pragma once

#include <cstdint>
#include <vector>

#include "compress/group_quant.h"
#include "compress/prune.h"
#include "core/thread_pool.h"

namespace squeeze::compress {

struct GptqOptions {
  QuantScheme scheme;
  double damp = 0.01;     // added to diag(H): this fraction of its mean
  int64_t block = 128;    // columns per lazy-update block
  bool act_order = false;
  bool static_groups = false;
  // SparseGPT (prune.h): method SparseGpt prunes in the same pass; None: plain GPTQ.
  PruneSpec prune;
};

// Throws UsageError for option combinations GPTQ cannot honour (static groups without
// act-order; act-order with groups but without static groups, which would need a per-column
// group index and a gather of the input at run time; damp outside [0, 1]; pruning other than
// SparseGPT, pruning with act-order (N:M groups would not be the file's), or pruning into a
// grid without an exact zero).
void check_gptq_options(const GptqOptions& o);

struct GptqStats {
  double damp_used = 0.0;      // the fraction finally added (raised when Cholesky failed)
  int64_t dead_columns = 0;    // columns whose input was always zero (set to zero)
  int64_t pruned = 0;          // weights the SparseGPT mask set to zero
};

// Quantizes w ([rows, cols] row-major) with the Hessian h ([cols, cols] row-major, double;
// overwritten) into dst (rows * row_bytes(st.type, cols) bytes). Throws Error when the damped
// Hessian stays not positive definite.
GptqStats gptq_quantize(const float* w, int64_t rows, int64_t cols, std::vector<double>& h,
                        const GptqOptions& o, const Storage& st, void* dst, ThreadPool& pool);

// ||(W - Ŵ) X||² / ||W X||² with H = X Xᵀ: the relative output error a quantized matrix
// (wq, dequantized) makes on the calibration inputs.
double relative_output_error(const float* w, const float* wq, int64_t rows, int64_t cols,
                             const std::vector<double>& h);

}  // namespace squeeze::compress
