#include "kv/kv_attention.h"

#include <algorithm>

#include "core/error.h"
#include "kv/kv_attention_impl.h"
#include "ops/pv.h"

namespace squeeze::kv {

void attention_decode(const ops::AttentionShape& shape, const KvCache& kv, int64_t il,
                      std::span<const ops::DecodeQuery> queries, ThreadPool& pool,
                      std::vector<float>& scratch, Isa isa) {
  if (!kv.options().quantized()) throw UsageError("kv::attention_decode reads a quantized cache");
  detail::UnitShape s;
  s.kv = &kv;
  s.il = il;
  s.hd = shape.head_dim;
  s.block = kv.block_tokens();
  s.group = kv.options().group;
  s.row = kv.row();
  s.bits = kv_bits(kv.type());
  s.k_channel = kv.options().k_axis == KeyAxis::Channel;
  s.outliers = kv.options().outliers > 0;
  s.k_prerope = kv.options().k_prerope;
  s.scale = shape.scale;
  s.window = shape.window;
  s.softmax = ops::attention_kernels(isa).softmax;
  // Units: (query, kv head, query heads of its group that run). A GQA group's heads share the
  // codes a unit unpacks; with fewer units than 4 per thread, one head per unit instead so
  // the threads stay busy.
  const int group = shape.n_head / shape.n_head_kv;
  const bool split = static_cast<int64_t>(queries.size()) * shape.n_head_kv < 4 * pool.size();
  const int per_unit = split ? 1 : std::min(group, detail::kUnitMaxHeads);
  std::vector<detail::Unit> units;
  int64_t max_pos = 0;
  for (const ops::DecodeQuery& q : queries) {
    max_pos = std::max(max_pos, q.pos);
    for (int hk = 0; hk < shape.n_head_kv; ++hk) {
      detail::Unit u{q.q, q.pos, q.kv.cells.data(), q.out, hk, 0, {}};
      for (int h = hk * group; h < (hk + 1) * group; ++h) {
        if (q.head_keep != nullptr && q.head_keep[h] == 0) {
          std::fill_n(q.out + h * shape.head_dim, shape.head_dim, 0.0f);
          continue;
        }
        u.heads[u.n_q++] = h;
        if (u.n_q == per_unit) {
          units.push_back(u);
          u.n_q = 0;
        }
      }
      if (u.n_q > 0) units.push_back(u);
    }
  }
  const int64_t per_thread = detail::unit_scratch(s, per_unit, max_pos);
  scratch.resize(static_cast<size_t>(per_thread * pool.size()));
  const detail::UnitsFn run = uses_avx512(isa) ? detail::attend_units_avx512
                              : uses_avx2(isa) ? detail::attend_units_avx2
                                               : detail::attend_units_scalar;
  run(s, units, per_thread, pool, scratch.data());
}

}  // namespace squeeze::kv
