#include "ops/attention_probs.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "core/cpu.h"
#include "formats/format.h"
#include "ops/pv.h"

namespace squeeze::ops {

float gumbel_noise(uint64_t seed, int64_t query, int64_t head, int64_t key) {
  uint64_t x = seed ^ (static_cast<uint64_t>(query) * 0x9e3779b97f4a7c15ULL) ^
               (static_cast<uint64_t>(head) << 48) ^ (static_cast<uint64_t>(key) * 0xc2b2ae3d27d4eb4fULL);
  x ^= x >> 30;  // splitmix64's finaliser
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  const double u = (static_cast<double>(x >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // (0, 1)
  return static_cast<float>(-std::log(-std::log(u)));
}

void attention_probs(const AttentionShape& shape, const float* q, int64_t n_tokens, int64_t pos0,
                     const KvView& kv, const ProbSums& sums, ThreadPool& pool,
                     std::vector<float>& scratch) {
  const int hd = shape.head_dim;
  const int group = shape.n_head / shape.n_head_kv;
  const int64_t n_ctx = pos0 + n_tokens;
  assert(kv.n() >= n_ctx && sums.stride >= n_ctx);
  const auto& f16k = formats::kernels(formats::DType::F16);
  const AttentionKernels ak = attention_kernels(active_isa());
  // Units: (kv head, part): a part is a fixed slice of the tokens of nonzero weight, whose
  // probabilities the unit sums in token order into its own row [n_ctx]; the rows are then
  // added in part order. Fixed slices, not the threads' shares, so the sums do not depend on
  // which thread ran what (a policy's choice among near ties repeats exactly).
  std::vector<int64_t> tokens;
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (sums.weights == nullptr || sums.weights[t] != 0) tokens.push_back(t);
  }
  if (tokens.empty()) return;
  constexpr int64_t kParts = 16;
  const int64_t n_tok = static_cast<int64_t>(tokens.size());
  const int64_t parts = std::min(kParts, n_tok);
  const int64_t n_units = shape.n_head_kv * parts;
  // Per unit its row; per thread scores [n_ctx] and q in half [hd] (rounded up to floats).
  const int64_t per_thread = n_ctx + (hd + 1) / 2;
  scratch.assign(static_cast<size_t>(n_units * n_ctx + per_thread * pool.size()), 0.0f);
  pool.parallel_for(n_units, 1, [&](int64_t i0, int64_t i1, int ith) {
    float* scores = scratch.data() + n_units * n_ctx + ith * per_thread;
    auto* q16 = reinterpret_cast<f16_t*>(scores + n_ctx);
    for (int64_t i = i0; i < i1; ++i) {
      const int hk = static_cast<int>(i / parts);
      const int64_t part = i % parts;
      float* row = scratch.data() + i * n_ctx;
      for (int64_t k = part * n_tok / parts; k < (part + 1) * n_tok / parts; ++k) {
        const int64_t t = tokens[static_cast<size_t>(k)];
        const float w = sums.weights == nullptr ? 1.0f : sums.weights[t];
        const int64_t n_kv = pos0 + t + 1;
        const int64_t lo = shape.window > 0 ? std::max<int64_t>(0, n_kv - shape.window) : 0;
        for (int h = hk * group; h < (hk + 1) * group; ++h) {
          f16k.quantize_row(q + (t * shape.n_head + h) * hd, q16, hd);
          ak.qk_f16(q16, kv.k + hk * hd, kv.row_stride, kv.cells.data() + lo, n_kv - lo, hd,
                    shape.scale, scores);
          if (sums.tau > 0) {
            const float tau = sums.tau + sums.tau_step * static_cast<float>(pos0 + t);
            for (int64_t j = 0; j < n_kv - lo; ++j) {
              scores[j] = (scores[j] + gumbel_noise(sums.seed, pos0 + t, h, lo + j)) / tau;
            }
          }
          ak.softmax(scores, n_kv - lo);
          for (int64_t j = 0; j < n_kv - lo; ++j) row[lo + j] += w * scores[j];
        }
      }
    }
  });
  pool.parallel_for(shape.n_head_kv * n_ctx, 256, [&](int64_t j0, int64_t j1, int) {
    for (int64_t i = j0; i < j1; ++i) {
      const int64_t hk = i / n_ctx, j = i % n_ctx;
      float s = 0;
      for (int64_t part = 0; part < parts; ++part) s += scratch[static_cast<size_t>((hk * parts + part) * n_ctx + j)];
      sums.acc[hk * sums.stride + j] += s;
    }
  });
}

}  // namespace squeeze::ops
