#include "compress/taylor.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "compress/output.h"
#include "core/error.h"
#include "model/context.h"
#include "model/names.h"

namespace squeeze::compress {

namespace {

// C (m x n, row-major) = alpha * op(A) op(B) + beta * C, op(X) = X or Xᵀ (k the inner size).
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
          float beta, float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(ta ? m : k), b, static_cast<int>(tb ? k : n), beta, c,
              static_cast<int>(n));
}

std::vector<float> decode_view(const ops::WeightView& w, ThreadPool& pool) {
  return decode_rows(w.type, w.data, w.n_cols, w.n_rows, pool);
}

}  // namespace

FfnGradients ffn_loss_gradients(const model::Model& m, const std::vector<std::vector<int32_t>>& samples,
                                ThreadPool& pool, const std::function<void(int64_t, int64_t)>& progress,
                                const std::atomic<bool>* cancel) {
  const model::HParams& hp = m.hparams();
  if (hp.arch != "llama" && hp.arch != "qwen2" && hp.arch != "qwen3") {
    throw UsageError("--method taylor ranks the SwiGLU neurons of the llama family (llama, qwen2, "
                     "qwen3), not " + hp.arch);
  }
  if (hp.n_expert > 0) throw UsageError("--method taylor does not rank MoE experts");
  const int64_t n_layer = hp.n_layer, E = hp.n_embd, F = hp.n_ff, V = m.output.n_rows;
  openblas_set_num_threads(static_cast<int>(pool.size()));
  const std::vector<float> head = decode_view(m.output, pool);  // [V, E]
  std::vector<std::vector<float>> wu(n_layer), wd(n_layer);  // [F, E], [E, F]
  FfnGradients grad;
  std::vector<std::vector<float>>&gg = grad.gate, &gu = grad.up, &gd = grad.down;
  gg.resize(n_layer);
  gu.resize(n_layer);
  gd.resize(n_layer);
  for (int64_t il = 0; il < n_layer; ++il) {
    const model::LayerWeights& L = m.layers[il];
    wu[il] = decode_view(L.ffn_up, pool);
    wd[il] = decode_view(L.ffn_down, pool);
    gg[il].assign(static_cast<size_t>(F * E), 0.0f);
    gu[il].assign(static_cast<size_t>(F * E), 0.0f);
    gd[il].assign(static_cast<size_t>(E * F), 0.0f);
  }

  // The forward pass's records: each layer's FFN input, gate pre-activations and activations,
  // and the final residual.
  std::vector<std::vector<float>> x(n_layer), z(n_layer), a(n_layer);
  std::vector<float> h;
  int64_t max_len = 1;
  for (const std::vector<int32_t>& s : samples) max_len = std::max<int64_t>(max_len, static_cast<int64_t>(s.size()));
  model::Context ctx(m, max_len, pool, max_len);
  ctx.set_callback([&](std::string_view name, int layer, const float* d, int64_t rows, int64_t width) {
    if (layer < 0) return;
    std::vector<float>* dst = name == model::names::kFfnNorm   ? &x[layer]
                              : name == model::names::kFfnGate ? &z[layer]
                              : name == model::names::kFfnAct  ? &a[layer]
                              : name == model::names::kLOut && layer == n_layer - 1 ? &h
                                                                                    : nullptr;
    if (dst != nullptr) dst->insert(dst->end(), d, d + rows * width);
  });
  const auto n_samples = static_cast<int64_t>(samples.size());
  for (int64_t si = 0; si < n_samples; ++si) {
    if (cancelled(cancel)) throw Interrupted("interrupted; no output written");
    const std::vector<int32_t>& tok = samples[si];
    const auto T = static_cast<int64_t>(tok.size());
    for (int64_t il = 0; il < n_layer; ++il) {
      x[il].clear();
      z[il].clear();
      a[il].clear();
    }
    h.clear();
    ctx.reset();
    const std::span<const float> logits = ctx.decode_from(tok, 0);  // [T, V]

    // ∂L/∂logits = softmax - onehot(next token) (the last row has no target), then through the
    // head and the final RMS norm: g = ∂L/∂(final residual), [T, E].
    std::vector<float> dl(static_cast<size_t>(T * V), 0.0f);
    pool.parallel_for(T - 1, 1, [&](int64_t t0, int64_t t1, int) {
      for (int64_t t = t0; t < t1; ++t) {
        const float* l = logits.data() + t * V;
        float* d = dl.data() + t * V;
        const float mx = *std::max_element(l, l + V);
        double sum = 0.0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(l[v] - mx));
        for (int64_t v = 0; v < V; ++v) d[v] = static_cast<float>(std::exp(static_cast<double>(l[v] - mx)) / sum);
        d[tok[t + 1]] -= 1.0f;
      }
    });
    std::vector<float> g(static_cast<size_t>(T * E));
    gemm(false, false, T, E, V, dl.data(), head.data(), 0.0f, g.data());  // ∂L/∂(normed)
    for (int64_t t = 0; t < T; ++t) {
      const float* ht = h.data() + t * E;
      float* gt = g.data() + t * E;
      double ss = 0.0;
      for (int64_t i = 0; i < E; ++i) ss += static_cast<double>(ht[i]) * ht[i];
      const double r = std::sqrt(ss / static_cast<double>(E) + hp.rms_eps);
      double dot = 0.0;  // Σ ∂L/∂n_i · n_i, n = h / r
      for (int64_t i = 0; i < E; ++i) {
        gt[i] *= m.output_norm[i];
        dot += static_cast<double>(gt[i]) * ht[i] / r;
      }
      for (int64_t i = 0; i < E; ++i) {
        gt[i] = static_cast<float>((gt[i] - ht[i] / r * dot / static_cast<double>(E)) / r);
      }
    }

    // Each block's backward pass from g: down, then the SwiGLU a = silu(z) · u to gate and up.
    std::vector<float> da(static_cast<size_t>(T * F)), u(static_cast<size_t>(T * F));
    for (int64_t il = 0; il < n_layer; ++il) {
      if (x[il].size() != static_cast<size_t>(T * E) || a[il].size() != static_cast<size_t>(T * F)) {
        throw Error("taylor: layer " + std::to_string(il) + " gave no FFN activations");
      }
      gemm(true, false, E, F, T, g.data(), a[il].data(), 1.0f, gd[il].data());  // gᵀ a
      gemm(false, false, T, F, E, g.data(), wd[il].data(), 0.0f, da.data());    // ∂L/∂a
      gemm(false, true, T, F, E, x[il].data(), wu[il].data(), 0.0f, u.data());  // u = x W_upᵀ
      for (int64_t k = 0; k < T * F; ++k) {
        const float zk = z[il][k], sig = 1.0f / (1.0f + std::exp(-zk));
        const float du = da[k] * zk * sig;                                    // ∂L/∂u
        const float dz = da[k] * u[k] * sig * (1.0f + zk * (1.0f - sig));  // ∂L/∂z
        u[k] = du;
        da[k] = dz;
      }
      gemm(true, false, F, E, T, u.data(), x[il].data(), 1.0f, gu[il].data());
      gemm(true, false, F, E, T, da.data(), x[il].data(), 1.0f, gg[il].data());
    }
    if (progress) progress(si + 1, n_samples);
  }

  return grad;
}

std::vector<std::vector<double>> ffn_taylor_importance(const model::Model& m, const FfnGradients& grad,
                                                       ThreadPool& pool) {
  const int64_t n_layer = m.hparams().n_layer, E = m.hparams().n_embd, F = m.hparams().n_ff;
  std::vector<std::vector<double>> score(n_layer, std::vector<double>(static_cast<size_t>(F), 0.0));
  for (int64_t il = 0; il < n_layer; ++il) {
    const model::LayerWeights& L = m.layers[il];
    const std::vector<float> wg = decode_view(L.ffn_gate, pool), wu = decode_view(L.ffn_up, pool),
                             wd = decode_view(L.ffn_down, pool);
    const std::vector<float>&gg = grad.gate[il], &gu = grad.up[il], &gd = grad.down[il];
    pool.parallel_for(F, 16, [&](int64_t j0, int64_t j1, int) {
      for (int64_t j = j0; j < j1; ++j) {
        double s = 0.0;
        for (int64_t k = 0; k < E; ++k) {
          s += std::fabs(static_cast<double>(wg[j * E + k]) * gg[j * E + k]) +
               std::fabs(static_cast<double>(wu[j * E + k]) * gu[j * E + k]);
        }
        for (int64_t i = 0; i < E; ++i) s += std::fabs(static_cast<double>(wd[i * F + j]) * gd[i * F + j]);
        score[il][j] = s;
      }
    });
  }
  return score;
}

}  // namespace squeeze::compress
