#include "ops/head_scores.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/error.h"
#include "formats/format.h"
#include "ops/pv.h"

namespace squeeze::ops {

std::string_view head_score_name(HeadScore s) {
  switch (s) {
    case HeadScore::Qk: return "qk";
    case HeadScore::Entropy: return "entropy";
    case HeadScore::VNorm: return "vnorm";
    case HeadScore::A2sf: return "a2sf";
  }
  return "?";
}

HeadScore parse_head_score(std::string_view s) {
  for (const HeadScore h : {HeadScore::Qk, HeadScore::Entropy, HeadScore::VNorm, HeadScore::A2sf}) {
    if (s == head_score_name(h)) return h;
  }
  throw UsageError("unknown head score '" + std::string(s) + "' (qk, entropy, vnorm, a2sf)");
}

void prepare_head_scores(const AttentionShape& shape, HeadScore kind, const KvView& kv, int64_t n,
                         ThreadPool& pool, HeadScoreScratch& scratch) {
  const int hd = shape.head_dim, n_kv_head = shape.n_head_kv;
  const int32_t* cells = kv.cells.data();
  // |k_j| per kv head (qk) or |v_j|_1 (vnorm).
  if (kind == HeadScore::Qk || kind == HeadScore::VNorm) {
    std::vector<float>& norm = kind == HeadScore::Qk ? scratch.k_norm : scratch.v_norm;
    norm.resize(static_cast<size_t>(n * n_kv_head));
    pool.parallel_for(n, 64, [&](int64_t j0, int64_t j1, int) {
      for (int64_t j = j0; j < j1; ++j) {
        const f16_t* row = (kind == HeadScore::Qk ? kv.k : kv.v) + cells[j] * kv.row_stride;
        for (int hk = 0; hk < n_kv_head; ++hk) {
          double s = 0;
          for (int d = 0; d < hd; ++d) {
            const double x = f16_to_f32(row[hk * hd + d]);
            s += kind == HeadScore::Qk ? x * x : std::abs(x);
          }
          norm[j * n_kv_head + hk] = static_cast<float>(kind == HeadScore::Qk ? std::sqrt(s) : s);
        }
      }
    });
  }
}

void head_scores(const AttentionShape& shape, HeadScore kind, const float* q, int64_t q_stride,
                 std::span<const int64_t> pos, const KvView& kv, float* score, ThreadPool& pool,
                 HeadScoreScratch& scratch) {
  const int hd = shape.head_dim, n_head = shape.n_head, n_kv_head = shape.n_head_kv;
  const int group = n_head / n_kv_head;
  const auto n_probe = static_cast<int64_t>(pos.size());
  const int64_t n = pos.back() + 1;
  const auto& f16k = formats::kernels(formats::DType::F16);
  const AttentionKernels ak = attention_kernels(active_isa());
  const int32_t* cells = kv.cells.data();
  if (kind == HeadScore::A2sf) scratch.probs.assign(static_cast<size_t>(n_probe * n_head * n), 0.0f);
  std::vector<double> unit(static_cast<size_t>(n_probe * n_head));
  const int64_t per_thread = n + (hd + 1) / 2;
  scratch.per_thread.resize(static_cast<size_t>(per_thread) * pool.size());
  pool.parallel_for(n_probe * n_head, 1, [&](int64_t i0, int64_t i1, int ith) {
    float* s = scratch.per_thread.data() + ith * per_thread;
    auto* q16 = reinterpret_cast<f16_t*>(s + n);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t pr = i / n_head;
      const int h = static_cast<int>(i % n_head), hk = h / group;
      const float* qh = q + pr * q_stride + h * hd;
      const int64_t lo = shape.window > 0 ? std::max<int64_t>(0, pos[pr] + 1 - shape.window) : 0;
      const int64_t m = pos[pr] + 1 - lo;
      f16k.quantize_row(qh, q16, hd);
      ak.qk_f16(q16, kv.k + hk * hd, kv.row_stride, cells + lo, m, hd, shape.scale, s);
      if (kind == HeadScore::Qk) {
        double qn = 0;
        for (int d = 0; d < hd; ++d) qn += static_cast<double>(qh[d]) * qh[d];
        qn = std::sqrt(qn);
        double best = -1;
        for (int64_t j = 0; j < m; ++j) {
          const double den = qn * scratch.k_norm[(lo + j) * n_kv_head + hk] * shape.scale;
          if (den > 0) best = std::max(best, s[j] / den);
        }
        unit[i] = best;
        continue;
      }
      ak.softmax(s, m);
      double u = 0;
      if (kind == HeadScore::Entropy) {
        for (int64_t j = 0; j < m; ++j) {
          if (s[j] > 0) u -= s[j] * std::log(static_cast<double>(s[j]));
        }
        u = m > 1 ? 1.0 - u / std::log(static_cast<double>(m)) : 1.0;
      } else if (kind == HeadScore::VNorm) {
        for (int64_t j = 0; j < m; ++j) u += s[j] * scratch.v_norm[(lo + j) * n_kv_head + hk];
      } else {
        std::copy_n(s, m, scratch.probs.data() + (pr * n_head + h) * n + lo);
      }
      unit[i] = u;
    }
  });
  for (int h = 0; h < n_head; ++h) {
    if (kind != HeadScore::A2sf) {
      double sum = 0;
      for (int64_t pr = 0; pr < n_probe; ++pr) sum += unit[pr * n_head + h];
      score[h] = static_cast<float>(sum / static_cast<double>(n_probe));
      continue;
    }
    // Accumulate in position order with the forgetting factor between probes.
    std::vector<double> acc(static_cast<size_t>(n), 0.0);
    double mass = 0;
    for (int64_t pr = 0; pr < n_probe; ++pr) {
      const double decay =
          pr == 0 ? 1.0 : std::pow(0.9, static_cast<double>(pos[pr] - pos[pr - 1]) / 512.0);
      const float* p = scratch.probs.data() + (pr * n_head + h) * n;
      for (int64_t j = 0; j < n; ++j) acc[j] = acc[j] * decay + p[j];
      mass = mass * decay + 1.0;
    }
    score[h] = static_cast<float>(*std::max_element(acc.begin(), acc.end()) / mass);
  }
}

void top_heads(std::span<const float> score, int64_t k, uint8_t* keep) {
  std::vector<int32_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return score[a] > score[b]; });
  for (size_t i = 0; i < order.size(); ++i) keep[order[i]] = static_cast<int64_t>(i) < k ? 1 : 0;
}

void top_groups(std::span<const float> score, int64_t group, int64_t k_groups, uint8_t* keep) {
  const auto n_groups = static_cast<int64_t>(score.size()) / group;
  std::vector<float> sum(static_cast<size_t>(n_groups), 0.0f);
  for (int64_t h = 0; h < n_groups * group; ++h) sum[h / group] += score[h];
  std::vector<uint8_t> kept(static_cast<size_t>(n_groups));
  top_heads(sum, k_groups, kept.data());
  for (int64_t h = 0; h < n_groups * group; ++h) keep[h] = kept[h / group];
}

}  // namespace squeeze::ops
