// Internal to kv_attention*.cpp: one unit of decode attention over a quantized cache
// (kv_attention_impl.h). Included inside an anonymous namespace by each ISA's file after it
// defines unpack_codes(codes, first, n, bits, levels, out) (out[i] = code first + i as a float,
// or its level: code_value), and,
// with KV_FAST_BLOCKS defined, fast_keys / fast_values: a whole frozen block's scores or value
// sums in registers, the same sums in the same order as the loops here, returning false where
// they do not apply (without it, they never apply). The
// float loops are plain so the compiler widens them with that file's flags, and
// -ffp-contract=off keeps every file's floats the same. No #pragma once: each file has its own.

#ifndef KV_FAST_BLOCKS
bool fast_keys(const UnitShape&, const FrozenBlock&, const Unit&, int64_t, float*, int64_t) { return false; }
bool fast_values(const UnitShape&, const FrozenBlock&, const Unit&, int64_t, int64_t, int64_t,
                 const float*, int64_t, float*, float*, int64_t) {
  return false;
}
#endif

// The outliers of the frozen blocks over positions [lo, end) of the unit's kv head: keys (kv 0)
// add scale * q . delta to the scores (keys before RoPE have theirs in frozen_key), values
// (kv 1) p * delta to o.
inline void add_outliers(const UnitShape& s, const Unit& u, int64_t lo, int64_t end, int kv,
                         float* scores, int64_t n, float* o) {
  const int64_t B = s.block, hd = s.hd, c0 = u.hk * hd;
  for (int64_t i = lo / B; i * B < end; ++i) {
    const int32_t b = u.cells[i * B] / static_cast<int32_t>(B);
    if (!s.kv->frozen(b)) continue;
    const FrozenBlock f = s.kv->frozen_block(s.il, b);
    float* block = scores + i * B - lo;  // token t's score (or probability) at block[h * n + t]
    // The head's columns are one run of the outliers (sorted by column).
    for (const Outlier& e : outliers_in_columns(kv == 0 ? f.k_out : f.v_out, f.n_out, c0, hd)) {
      const int64_t t = e.t, d = e.c - c0;
      if (i * B + t < lo || i * B + t >= end) continue;
      const float delta = f16_to_f32(e.delta);
      for (int64_t h = 0; h < u.n_q; ++h) {
        if (kv == 0) {
          block[h * n + t] += s.scale * (u.q[u.heads[h] * hd + d] * delta);
        } else {
          o[h * hd + d] += block[h * n + t] * delta;
        }
      }
    }
  }
}

inline void attend_unit(const UnitShape& s, const Unit& u, float* scratch) {
  const int64_t B = s.block, hd = s.hd, n_q = u.n_q;
  const int64_t end = u.pos + 1;
  const int64_t lo = s.window > 0 ? std::max<int64_t>(0, end - s.window) : 0;
  const int64_t n = end - lo;
  const int64_t c0 = u.hk * hd;  // the kv head's first column
  const int64_t per_row = s.row / s.group;
  const int64_t g0 = c0 / s.group, n_groups = (c0 + hd - 1) / s.group - g0 + 1;
  float* scores = scratch;        // [n_q, n]: position p at p - lo
  float* tile = scores + n_q * n;  // [hd, B] keys of a block by column
  float* x = tile + hd * B;        // [hd] a row's codes
  float* acc = x + hd;             // [B]
  float* o = acc + B;              // [n_q, hd]
  float* cst = o + n_q * hd;       // [n_q, n_groups]: sums of p * min per value group
  for (int64_t i = lo / B; i * B < end; ++i) {
    const int64_t t0 = std::max<int64_t>(lo - i * B, 0), t1 = std::min<int64_t>(end - i * B, B);
    const int32_t b = u.cells[i * B] / static_cast<int32_t>(B);
    float* s_block = scores + i * B - lo;  // token t's score at s_block[h * n + t]
    const bool frozen = s.kv->frozen(b);
    if (frozen && s.k_channel && !s.k_prerope) {
      const FrozenBlock f = s.kv->frozen_block(s.il, b);
      if (t0 == 0 && t1 == B && fast_keys(s, f, u, c0, s_block, n)) continue;
      for (int64_t d = 0; d < hd; ++d) unpack_codes(f.k_codes + (c0 + d) * f.k_stride, 0, B, s.bits, f.k_levels, tile + d * B);
      for (int64_t h = 0; h < n_q; ++h) {
        const float* q = u.q + u.heads[h] * hd;
        float base = 0;
        for (int64_t d = 0; d < hd; ++d) base += q[d] * f16_to_f32(f.k_params[c0 + d].min);
        for (int64_t t = t0; t < t1; ++t) acc[t] = base;
        for (int64_t d = 0; d < hd; ++d) {
          const float w = q[d] * f16_to_f32(f.k_params[c0 + d].scale);
          const float* col = tile + d * B;
          for (int64_t t = t0; t < t1; ++t) acc[t] += w * col[t];
        }
        for (int64_t t = t0; t < t1; ++t) s_block[h * n + t] = s.scale * acc[t];
      }
      continue;
    }
    // Keys in half (a hot block), per token or before RoPE: each row into the tile's columns as
    // floats.
    if (frozen && s.k_prerope && s.k_channel) {
      // The head's codes by channel, dequantized, its outliers added, rotated token by token.
      const FrozenBlock f = s.kv->frozen_block(s.il, b);
      for (int64_t d = 0; d < hd; ++d) {
        float* col = tile + d * B;
        unpack_codes(f.k_codes + (c0 + d) * f.k_stride, 0, B, s.bits, f.k_levels, col);
        const float mn = f16_to_f32(f.k_params[c0 + d].min), sc = f16_to_f32(f.k_params[c0 + d].scale);
        for (int64_t t = t0; t < t1; ++t) col[t] = mn + col[t] * sc;
      }
      for (const Outlier& e : outliers_in_columns(f.k_out, f.n_out, c0, hd)) {
        if (e.t >= t0 && e.t < t1) tile[(e.c - c0) * B + e.t] += f16_to_f32(e.delta);
      }
      s.kv->rotate_keys(s.il, b, t0, t1, tile, B);
    } else if (frozen && s.k_prerope) {
      for (int64_t t = t0; t < t1; ++t) {
        s.kv->frozen_key(s.il, b, t, c0, hd, x);
        for (int64_t d = 0; d < hd; ++d) tile[d * B + t] = x[d];
      }
    } else if (frozen) {
      const FrozenBlock f = s.kv->frozen_block(s.il, b);
      for (int64_t t = t0; t < t1; ++t) {
        unpack_codes(f.k_codes + t * f.k_stride, c0, hd, s.bits, f.k_levels, x);
        const QuantParams* p = f.k_params + t * per_row;
        for (int64_t d = 0; d < hd; ++d) {
          const QuantParams& g = p[(c0 + d) / s.group];
          tile[d * B + t] = f16_to_f32(g.min) + x[d] * f16_to_f32(g.scale);
        }
      }
    } else {
      const f16_t* rows = s.kv->hot_rows(s.il, b);
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t d = 0; d < hd; ++d) tile[d * B + t] = f16_to_f32(rows[t * s.row + c0 + d]);
      }
    }
    for (int64_t h = 0; h < n_q; ++h) {
      const float* q = u.q + u.heads[h] * hd;
      for (int64_t t = t0; t < t1; ++t) acc[t] = 0;
      for (int64_t d = 0; d < hd; ++d) {
        const float w = q[d];
        const float* col = tile + d * B;
        for (int64_t t = t0; t < t1; ++t) acc[t] += w * col[t];
      }
      for (int64_t t = t0; t < t1; ++t) s_block[h * n + t] = s.scale * acc[t];
    }
  }
  if (s.outliers && !s.k_prerope) add_outliers(s, u, lo, end, 0, scores, n, nullptr);
  for (int64_t h = 0; h < n_q; ++h) s.softmax(scores + h * n, n);
  std::fill_n(o, n_q * hd, 0.0f);
  std::fill_n(cst, n_q * n_groups, 0.0f);
  for (int64_t i = lo / B; i * B < end; ++i) {
    const int64_t t0 = std::max<int64_t>(lo - i * B, 0), t1 = std::min<int64_t>(end - i * B, B);
    const int32_t b = u.cells[i * B] / static_cast<int32_t>(B);
    const float* p_block = scores + i * B - lo;
    if (s.kv->frozen(b)) {
      const FrozenBlock f = s.kv->frozen_block(s.il, b);
      if (fast_values(s, f, u, c0, t0, t1, p_block, n, o, cst, n_groups)) continue;
      for (int64_t t = t0; t < t1; ++t) {
        unpack_codes(f.v_codes + t * f.v_stride, c0, hd, s.bits, f.v_levels, x);
        const QuantParams* gp = f.v_params + t * per_row + g0;
        for (int64_t h = 0; h < n_q; ++h) {
          const float p = p_block[h * n + t];
          float* oh = o + h * hd;
          // The head's columns group by group: [d0, d1) share group g.
          for (int64_t g = 0, d0 = 0; g < n_groups; ++g) {
            const int64_t d1 = std::min(hd, (g0 + g + 1) * s.group - c0);
            const float w = p * f16_to_f32(gp[g].scale);
            for (int64_t d = d0; d < d1; ++d) oh[d] += w * x[d];
            cst[h * n_groups + g] += p * f16_to_f32(gp[g].min);
            d0 = d1;
          }
        }
      }
      continue;
    }
    const f16_t* rows = s.kv->hot_rows(s.il, b) + B * s.row;
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t d = 0; d < hd; ++d) x[d] = f16_to_f32(rows[t * s.row + c0 + d]);
      for (int64_t h = 0; h < n_q; ++h) {
        const float p = p_block[h * n + t];
        float* oh = o + h * hd;
        for (int64_t d = 0; d < hd; ++d) oh[d] += p * x[d];
      }
    }
  }
  if (s.outliers) add_outliers(s, u, lo, end, 1, scores, n, o);
  for (int64_t h = 0; h < n_q; ++h) {
    float* out = u.out + u.heads[h] * hd;
    for (int64_t g = 0, d0 = 0; g < n_groups; ++g) {
      const int64_t d1 = std::min(hd, (g0 + g + 1) * s.group - c0);
      for (int64_t d = d0; d < d1; ++d) out[d] = o[h * hd + d] + cst[h * n_groups + g];
      d0 = d1;
    }
  }
}

// The units on pool, each thread in its own per_thread floats of scratch.
void run_units(const UnitShape& s, std::span<const Unit> units, int64_t per_thread,
               ThreadPool& pool, float* scratch) {
  pool.parallel_for(static_cast<int64_t>(units.size()), 1, [&](int64_t i0, int64_t i1, int ith) {
    for (int64_t i = i0; i < i1; ++i) attend_unit(s, units[static_cast<size_t>(i)], scratch + ith * per_thread);
  });
}
