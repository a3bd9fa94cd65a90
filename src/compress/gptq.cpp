#include "compress/gptq.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "formats/format.h"

namespace squeeze::compress {

namespace {

// Damping is raised by this factor, at most kDampRetries times, while the Cholesky
// factorisation fails (a Hessian that is singular beyond its dead columns).
constexpr double kDampRaise = 10.0;
constexpr int kDampRetries = 3;

// The upper Cholesky factor U of H⁻¹ (H⁻¹ = Uᵀ U) as floats, lower triangle zero. h is
// damped in place; returns false when H is not positive definite.
bool inverse_cholesky_upper(std::vector<double>& h, int64_t n, std::vector<float>& u) {
  const auto ni = static_cast<lapack_int>(n);
  if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', ni, h.data(), ni) != 0) return false;
  if (LAPACKE_dpotri(LAPACK_ROW_MAJOR, 'L', ni, h.data(), ni) != 0) return false;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) h[i * n + j] = h[j * n + i];
  }
  if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'U', ni, h.data(), ni) != 0) return false;
  u.assign(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i; j < n; ++j) u[i * n + j] = static_cast<float>(h[i * n + j]);
  }
  return true;
}

}  // namespace

void check_gptq_options(const GptqOptions& o) {
  check_scheme(o.scheme);
  if (o.static_groups && !o.act_order) {
    throw UsageError("--static-groups only makes sense with --act-order");
  }
  if (o.act_order && o.scheme.group > 0 && !o.static_groups) {
    throw UsageError(
        "--act-order with groups needs --static-groups: groups formed in activation order "
        "would not be contiguous in the row and would need a per-column group index and a "
        "gather of the input at run time, which squeeze's formats do not have (or use "
        "--group-size -1)");
  }
  if (!(o.damp >= 0.0 && o.damp <= 1.0)) throw UsageError("--damp must be in [0, 1]");
  if (o.block <= 0 || o.block % 128 != 0) throw UsageError("GPTQ block must be a multiple of 128");
  if (!o.prune.active()) return;
  check_prune_spec(o.prune);
  if (o.prune.method != PruneMethod::SparseGpt) {
    throw Error("GPTQ prunes only by SparseGPT; magnitude and Wanda masks are set beforehand");
  }
  if (o.act_order) throw UsageError("pruning does not take --act-order");
  if (!o.scheme.sym) {
    throw UsageError("a pruned matrix needs a symmetric grid, where zero is a code (--sym)");
  }
}

GptqStats gptq_quantize(const float* w, int64_t rows, int64_t cols, std::vector<double>& h,
                        const GptqOptions& o, const Storage& st, void* dst, ThreadPool& pool) {
  check_gptq_options(o);
  if (static_cast<int64_t>(h.size()) != cols * cols) throw Error("GPTQ: Hessian size mismatch");
  const QuantScheme& s = o.scheme;
  const Grid g = grid_for(s, st.type);
  if (o.prune.nm() && cols % o.prune.m != 0) {
    throw UsageError("rows of " + std::to_string(cols) + " weights do not split into groups of " +
                     std::to_string(o.prune.m));
  }
  const int64_t gs = st.group;
  const int64_t n_groups = cols / gs;
  GptqStats stats;

  std::vector<float> wk(w, w + rows * cols);
  // Columns that never saw a non-zero input: any value is exact on the calibration data;
  // GPTQ sets them to zero and gives the Hessian a unit diagonal there.
  for (int64_t i = 0; i < cols; ++i) {
    if (h[i * cols + i] != 0.0) continue;
    h[i * cols + i] = 1.0;
    for (int64_t r = 0; r < rows; ++r) wk[r * cols + i] = 0.0f;
    ++stats.dead_columns;
  }
  const float clip = tensor_clip(w, rows * cols, s);

  // Parameters fixed before the pass: per row, or static groups from the original weights.
  std::vector<GroupParams> params(static_cast<size_t>(rows * n_groups));
  const bool fixed_params = st.per_row || o.static_groups;
  if (fixed_params) {
    pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* x = wk.data() + r * cols;
        for (int64_t b = 0; b < n_groups; ++b) {
          params[r * n_groups + b] =
              st.per_row ? (b == 0 ? choose_params(x, cols, g, s.scale, clip)
                                   : params[r * n_groups])
                         : choose_params(x + b * gs, gs, g, s.scale, clip);
        }
      }
    });
  }

  // Act-order: columns by decreasing diag(H) (stable, so ties keep their order).
  std::vector<int64_t> perm(cols);
  std::iota(perm.begin(), perm.end(), 0);
  if (o.act_order) {
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
      return h[a * cols + a] > h[b * cols + b];
    });
    std::vector<float> wp(wk.size());
    std::vector<double> hp(h.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j) wp[r * cols + j] = wk[r * cols + perm[j]];
    }
    for (int64_t i = 0; i < cols; ++i) {
      for (int64_t j = 0; j < cols; ++j) hp[i * cols + j] = h[perm[i] * cols + perm[j]];
    }
    wk.swap(wp);
    h.swap(hp);
  }

  double mean_diag = 0.0;
  for (int64_t i = 0; i < cols; ++i) mean_diag += h[i * cols + i];
  mean_diag /= static_cast<double>(cols);
  std::vector<float> hinv;
  double damp = o.damp;
  for (int attempt = 0;; ++attempt) {
    std::vector<double> hd = h;
    for (int64_t i = 0; i < cols; ++i) hd[i * cols + i] += damp * mean_diag;
    if (inverse_cholesky_upper(hd, cols, hinv)) break;
    if (attempt == kDampRetries) {
      throw Error("GPTQ: the damped Hessian is not positive definite (damp " +
                  std::to_string(damp) + "); try more calibration samples or a larger --damp");
    }
    damp *= kDampRaise;
  }
  stats.damp_used = damp;

  std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));  // in permuted column order
  const int64_t bs = o.block;
  std::vector<float> err(static_cast<size_t>(rows * bs));
  // SparseGPT's mask of the current block, [rows, bs]: unstructured, the lowest w² / U_jj² of
  // the whole block when it starts; N:M, per row when each group of m columns starts.
  const PruneSpec& ps = o.prune;
  std::vector<uint8_t> mask(ps.active() ? static_cast<size_t>(rows * bs) : 0);
  std::vector<float> mask_scores(ps.active() && !ps.nm() ? static_cast<size_t>(rows * bs) : 0);
  for (int64_t i1 = 0; i1 < cols; i1 += bs) {
    const int64_t i2 = std::min(cols, i1 + bs);
    const int64_t bw = i2 - i1;
    std::fill(mask.begin(), mask.end(), 0);
    if (ps.active() && !ps.nm()) {
      pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t i = i1; i < i2; ++i) {
            const float u = hinv[i * cols + i];
            mask_scores[r * bw + (i - i1)] = wk[r * cols + i] * wk[r * cols + i] / (u * u);
          }
        }
      });
      mark_lowest(mask_scores.data(), rows * bw, zeros_among(ps.sparsity, rows * bw), mask.data());
    }
    // Within a block every row is independent: quantize a column, spread its error over the
    // rest of the block.
    pool.parallel_for(rows, 4, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        float* wr = wk.data() + r * cols;
        GroupParams* pr = params.data() + r * n_groups;
        uint8_t* mr = mask.data() + r * bw;  // unstructured: [r, i - i1] of [rows, bw]
        float nm_scores[128];
        for (int64_t i = i1; i < i2; ++i) {
          if (ps.nm() && (i - i1) % ps.m == 0) {
            for (int64_t j = 0; j < ps.m; ++j) {
              const float u = hinv[(i + j) * cols + i + j];
              nm_scores[j] = wr[i + j] * wr[i + j] / (u * u);
            }
            mark_lowest(nm_scores, ps.m, ps.n, mr + (i - i1));
          }
          const int64_t grp = perm[i] / gs;
          // Dynamic groups: set from the current (error-updated) weights of the group when
          // its first column comes up. (The reference code reads them from the weights as
          // of the block start; the updated ones are the ones being rounded.)
          if (!fixed_params && i % gs == 0) pr[grp] = choose_params(wr + i, gs, g, s.scale, clip);
          const int c = ps.active() && mr[i - i1] ? g.zero : quantize_code(wr[i], pr[grp], g);
          codes[r * cols + i] = static_cast<uint8_t>(c);
          const float* hi = hinv.data() + i * cols;
          const float e = (wr[i] - dequant_code(c, pr[grp])) / hi[i];
          for (int64_t j = i + 1; j < i2; ++j) wr[j] -= e * hi[j];
          err[r * bs + (i - i1)] = e;
        }
      }
    });
    for (int64_t k = 0; k < rows * bw && ps.active(); ++k) stats.pruned += mask[k];
    // The lazy update of every later column: W[:, i2:] -= Err · H⁻¹[i1:i2, i2:].
    if (i2 < cols) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                  static_cast<int>(cols - i2), static_cast<int>(i2 - i1), -1.0f, err.data(),
                  static_cast<int>(bs), hinv.data() + i1 * cols + i2, static_cast<int>(cols),
                  1.0f, wk.data() + i2, static_cast<int>(cols));
    }
  }

  const size_t row_bytes = formats::row_bytes(st.type, cols);
  auto* out = static_cast<uint8_t*>(dst);
  pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1, int) {
    std::vector<uint8_t> row(cols);
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < cols; ++j) row[perm[j]] = codes[r * cols + j];
      encode_row(st.type, gs, row.data(), params.data() + r * n_groups, cols, out + r * row_bytes);
    }
  });
  return stats;
}

double relative_output_error(const float* w, const float* wq, int64_t rows, int64_t cols,
                             const std::vector<double>& h) {
  // tr(A H Aᵀ) for A = W - Ŵ and A = W, through one product with H each.
  auto quad = [&](const std::vector<double>& a) {
    std::vector<double> ah(a.size());
    cblas_dsymm(CblasRowMajor, CblasRight, CblasUpper, static_cast<int>(rows),
                static_cast<int>(cols), 1.0, h.data(), static_cast<int>(cols), a.data(),
                static_cast<int>(cols), 0.0, ah.data(), static_cast<int>(cols));
    double t = 0.0;
    for (size_t i = 0; i < a.size(); ++i) t += a[i] * ah[i];
    return t;
  };
  std::vector<double> a(w, w + rows * cols);
  const double base = quad(a);
  for (int64_t i = 0; i < rows * cols; ++i) a[i] = static_cast<double>(w[i]) - wq[i];
  const double diff = quad(a);
  return base > 0.0 ? diff / base : 0.0;
}

}  // namespace squeeze::compress
