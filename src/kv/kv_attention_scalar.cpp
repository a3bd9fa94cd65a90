// The scalar twin of decode attention over a quantized cache (kv_attention.h).
#include <algorithm>

#include "kv/kv_attention_impl.h"
#include "kv/kv_quant.h"

namespace squeeze::kv::detail {
namespace {

void unpack_codes(const uint8_t* codes, int64_t first, int64_t n, int bits, const float* levels, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = code_value(codes, first + i, bits, levels);
}

#include "kv/kv_attention_unit.h"

}  // namespace

void attend_units_scalar(const UnitShape& s, std::span<const Unit> units, int64_t per_thread,
                         ThreadPool& pool, float* scratch) {
  run_units(s, units, per_thread, pool, scratch);
}

}  // namespace squeeze::kv::detail
