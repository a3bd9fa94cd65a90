// The scalar twin of decode attention over a quantized cache (kv_attention.h).
#include <algorithm>

#include "kv/kv_attention_impl.h"
#include "kv/kv_quant.h"

namespace squeeze::kv::detail {
namespace {

void unpack_codes(const uint8_t* codes, int64_t first, int64_t n, int bits, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(code_at(codes, first + i, bits));
}

// No whole-block register kernels: the loops of kv_attention_unit.h.
bool fast_keys(const UnitShape&, const FrozenBlock&, const Unit&, int64_t, float*, int64_t) { return false; }
bool fast_values(const UnitShape&, const FrozenBlock&, const Unit&, int64_t, int64_t, int64_t,
                 const float*, int64_t, float*, float*, int64_t) {
  return false;
}

#include "kv/kv_attention_unit.h"

}  // namespace

void attend_units_scalar(const UnitShape& s, std::span<const Unit> units, int64_t per_thread,
                         ThreadPool& pool, float* scratch) {
  pool.parallel_for(static_cast<int64_t>(units.size()), 1, [&](int64_t i0, int64_t i1, int ith) {
    for (int64_t i = i0; i < i1; ++i) attend_unit(s, units[static_cast<size_t>(i)], scratch + ith * per_thread);
  });
}

}  // namespace squeeze::kv::detail
