#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/ggml_math.h"
#include "ops/pv.h"

namespace squeeze::ops {

void pv_scalar(const float* p, const f16_t* v, int64_t v_stride, const int32_t* rows,
               int64_t n_kv, int head_dim, SumOrder order, float* partial, float* out) {
  const int np = n_partials(order);
  std::memset(partial, 0, sizeof(float) * np * head_dim);
  for (int64_t j = 0; j < n_kv; ++j) {
    const f16_t* vr = v + rows[j] * v_stride;
    float* acc = partial + (j % np) * head_dim;
    for (int d = 0; d < head_dim; ++d) acc[d] = std::fma(p[j], f16_to_f32(vr[d]), acc[d]);
  }
  for (int d = 0; d < head_dim; ++d) out[d] = fold_partials(partial + d, head_dim, order);
}

float dot_f16_ordered(const f16_t* a, const f16_t* b, int n, SumOrder order) {
  const int np = n_partials(order);
  float partial[32] = {};
  const int n_main = order == SumOrder::VecDotF16 ? (n & ~31) : n;
  for (int i = 0; i < n_main; ++i) {
    partial[i % np] = std::fma(f16_to_f32(a[i]), f16_to_f32(b[i]), partial[i % np]);
  }
  double sum = fold_partials(partial, 1, order);
  for (int i = n_main; i < n; ++i) sum += static_cast<double>(f16_to_f32(a[i]) * f16_to_f32(b[i]));
  return static_cast<float>(sum);
}

void qk_f16_vecdot(const f16_t* q, const f16_t* k, int64_t k_stride, const int32_t* rows,
                   int64_t n_kv, int head_dim, float scale, float* scores) {
  for (int64_t j = 0; j < n_kv; ++j) {
    scores[j] = scale * dot_f16_ordered(k + rows[j] * k_stride, q, head_dim, SumOrder::VecDotF16);
  }
}

void softmax_ggml(float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  for (int64_t g = 0; g < n; g += 8) {
    float e[8] = {};
    for (int l = 0; l < 8 && g + l < n; ++l) e[l] = x[g + l] = expf_ggml(x[g + l] - max);
    sum += static_cast<double>(hsum8_movehl(e));
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu_ggml(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_ggml(gate[i]) * up[i];
}

}  // namespace squeeze::ops
