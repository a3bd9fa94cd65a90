// Internal to kv_attention*.cpp: the units of decode attention over a quantized cache and the
// ISA twins that run them (kv_attention_unit.h holds the code they share).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"

namespace squeeze::kv::detail {

struct UnitShape {
  const KvCache* kv = nullptr;
  int64_t il = 0;
  int64_t hd = 0, block = 0, group = 0, row = 0;
  int bits = 0;
  bool k_channel = true;
  bool outliers = false;  // frozen blocks hold outliers (--kv-outliers)
  bool k_prerope = false;  // frozen keys are codes before RoPE (read through KvCache::frozen_key)
  float scale = 0;
  int64_t window = 0;
  void (*softmax)(float* x, int64_t n) = nullptr;
};

inline constexpr int kUnitMaxHeads = 16;

struct Unit {
  const float* q = nullptr;  // the query row, [n_head * hd]
  int64_t pos = 0;
  const int32_t* cells = nullptr;
  float* out = nullptr;      // the output row, [n_head * hd]
  int hk = 0;
  int n_q = 0;
  int heads[kUnitMaxHeads] = {};
};

// Floats of scratch a unit needs.
inline int64_t unit_scratch(const UnitShape& s, int n_q, int64_t max_pos) {
  const int64_t groups = s.hd / std::min(s.group, s.hd) + 2;
  return n_q * (max_pos + 1) + s.hd * s.block + s.hd + s.block + n_q * s.hd + n_q * groups;
}

// Runs the units on pool, each thread in its own per_thread floats of scratch.
using UnitsFn = void (*)(const UnitShape& s, std::span<const Unit> units, int64_t per_thread,
                         ThreadPool& pool, float* scratch);
void attend_units_scalar(const UnitShape& s, std::span<const Unit> units, int64_t per_thread,
                         ThreadPool& pool, float* scratch);
void attend_units_avx2(const UnitShape& s, std::span<const Unit> units, int64_t per_thread,
                       ThreadPool& pool, float* scratch);
void attend_units_avx512(const UnitShape& s, std::span<const Unit> units, int64_t per_thread,
                         ThreadPool& pool, float* scratch);

}  // namespace squeeze::kv::detail
