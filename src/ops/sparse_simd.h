// Internal: the loop structure of the SIMD sparse products (sparse_gemv.h), written once over a
// vector type V (Avx2: 8 floats, Avx512: 16). Include only from sparse_avx2.cpp and
// sparse_avx512.cpp, after defining V with the members listed below.
//
// Everything here sits in an anonymous namespace on purpose: each SIMD unit gets its own copy,
// compiled for its ISA, and none becomes a link-once symbol that a caller on a CPU without that
// ISA could get (see formats/avx2_util.h). For the same reason the units call no inline
// function of another header.
//
// The products are memory-bound only while decoding stays cheap, so the hot loop (pass):
//   - takes the active inputs in groups of up to kGroup per pass over the row slice, so each
//     accumulator vector is loaded and stored once per group, not once per input (and never
//     when a block has at most kGroup active inputs: its one pass starts from zero and folds the
//     scales straight into y);
//   - decodes 32 rows of an input per step (one Q4 row group: 16 bytes of nibbles) into
//     32 / V::kLanes vectors and accumulates them with fused multiply-adds;
//   - prefetches the same rows of inputs further down the active list (about kPrefetchBytes
//     ahead), once per cache line, and the scales of the blocks they start: each input's slice
//     is only a few cache lines, too short for the hardware prefetcher to pick up (measured:
//     without prefetching the products ran 2-3x slower from DRAM than from cache).
//
// V provides: Vec, kLanes, zero(), set1(float), load(const float*), store(float*, Vec),
// add, sub, mul, fmadd(a, b, c) = a*b + c, halves(const uint16_t*) (kLanes halves to floats),
// and the decoders F16Codes, Q8Codes, Q4Codes with
//   static constexpr int64_t kStepBytes;                  // bytes of one input per 32 rows
//   static void load(const uint8_t* col, int64_t r, Vec v[32 / kLanes]);  // rows r..r+31
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "ops/sparse_gemv.h"

namespace squeeze::ops {
namespace {

constexpr int kGroup = 4;                 // active inputs per pass (8 or 16 gained nothing)
constexpr int64_t kRows = 32;             // rows per step: one Q4 row group
constexpr int64_t kPrefetchBytes = 4096;  // how far ahead to prefetch (see prefetch_distance)

// How a block's sums meet its scales: y += d*acc (Q8_0), d*(acc - 8 sx) (Q4_0),
// d*acc + m*sx (Q4_1).
struct Fold {
  formats::DType type;
  const uint16_t* d;  // the block's scales, indexed by row
  const uint16_t* m;  // Q4_1's mins
  float sx;           // the sum of the block's active inputs
};

// The active inputs of one pass (n: 4, 2 or 1), and what it prefetches: the weights of later
// inputs, and the scales (and Q4_1's mins) of the blocks that start among those.
struct Group {
  int n = 0;
  const uint8_t* cols[kGroup];   // each input's weights (row 0)
  float xs[kGroup];
  const uint8_t* ahead[kGroup];  // weights of later inputs (row 0)
  int n_headers = 0;
  const uint8_t* headers[2 * kGroup];  // d (or m) arrays of those blocks (row 0)
};

// The size of the next pass over `left` inputs: the largest power of 2 up to both (so passes
// come in three sizes, not four).
inline int group_size(int64_t left) {
  int g = kGroup;
  while (g > left) g /= 2;
  return g;
}

template <typename V>
inline void fold_vec(const Fold& f, int64_t r, typename V::Vec acc, float* y) {
  const auto d = V::halves(f.d + r);
  const auto yv = V::load(y + r);
  if (f.type == formats::DType::Q8_0) {
    V::store(y + r, V::fmadd(d, acc, yv));
  } else if (f.type == formats::DType::Q4_0) {
    V::store(y + r, V::fmadd(d, V::sub(acc, V::set1(8.0f * f.sx)), yv));
  } else {
    V::store(y + r, V::add(yv, V::fmadd(d, acc, V::mul(V::halves(f.m + r), V::set1(f.sx)))));
  }
}

// The hot loop: one pass of G inputs over rows [r0, r1), acc (indexed from r0) +=
// sum_j xs[j] * col_j. kFirst: acc starts at zero instead of being loaded. kLast: the sums go to
// y through the block's scales instead of back to acc. A slice need not start on a cache line,
// so the last line of each prefetched slice is requested at the end.
template <typename V, typename Codes, int G, bool kFirst, bool kLast>
void pass(const Group& grp, int64_t r0, int64_t r1, float* acc, const Fold& fold, float* y) {
  using Vec = typename V::Vec;
  constexpr int kVecs = kRows / V::kLanes;
  constexpr int64_t kStepsPerLine = 64 / Codes::kStepBytes;
  const int64_t byte0 = r0 / kRows * Codes::kStepBytes;
  Vec xv[G];
  for (int j = 0; j < G; ++j) xv[j] = V::set1(grp.xs[j]);
  for (int64_t r = r0, step = 0; r < r1; r += kRows, ++step) {
    if (step % kStepsPerLine == 0) {
      for (int j = 0; j < kGroup; ++j) {
        const uint8_t* p = grp.ahead[j] + byte0 + step * Codes::kStepBytes;
        _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
      }
    }
    // 32 rows of halves: one cache line (blocks start on a line).
    for (int h = 0; h < grp.n_headers; ++h) {
      _mm_prefetch(reinterpret_cast<const char*>(grp.headers[h] + 2 * r), _MM_HINT_T0);
    }
    float* a = acc + (r - r0);
    Vec sum[kVecs];
    for (int k = 0; k < kVecs; ++k) sum[k] = kFirst ? V::zero() : V::load(a + V::kLanes * k);
    for (int j = 0; j < G; ++j) {
      Vec q[kVecs];
      Codes::load(grp.cols[j], r, q);
      for (int k = 0; k < kVecs; ++k) sum[k] = V::fmadd(xv[j], q[k], sum[k]);
    }
    for (int k = 0; k < kVecs; ++k) {
      if constexpr (kLast) {
        fold_vec<V>(fold, r + V::kLanes * k, sum[k], y);
      } else {
        V::store(a + V::kLanes * k, sum[k]);
      }
    }
  }
  const int64_t last = (r1 - r0) / kRows * Codes::kStepBytes - 1;
  for (int j = 0; j < kGroup; ++j) {
    _mm_prefetch(reinterpret_cast<const char*>(grp.ahead[j] + byte0 + last), _MM_HINT_T0);
  }
}

// pass with G = grp.n.
template <typename V, typename Codes, bool kFirst, bool kLast, int G = kGroup>
void pass_n(const Group& grp, int64_t r0, int64_t r1, float* acc, const Fold& fold, float* y) {
  if constexpr (G > 1) {
    if (grp.n < G) return pass_n<V, Codes, kFirst, kLast, G / 2>(grp, r0, r1, acc, fold, y);
  }
  pass<V, Codes, G, kFirst, kLast>(grp, r0, r1, acc, fold, y);
}

template <typename V, typename Codes>
void pass_any(const Group& grp, bool first, bool last, int64_t r0, int64_t r1, float* acc,
              const Fold& fold, float* y) {
  if (first) {
    if (last) {
      pass_n<V, Codes, true, true>(grp, r0, r1, acc, fold, y);
    } else {
      pass_n<V, Codes, true, false>(grp, r0, r1, acc, fold, y);
    }
  } else if (last) {
    pass_n<V, Codes, false, true>(grp, r0, r1, acc, fold, y);
  } else {
    pass_n<V, Codes, false, false>(grp, r0, r1, acc, fold, y);
  }
}

// How many active inputs ahead to prefetch: about kPrefetchBytes of weights, but at least
// kMinAhead inputs (for long slices) and at most kMaxAhead (for short ones: the kernel starts by
// prefetching that many inputs at once, and long bursts were slower). Measured on SmolLM2's
// shapes, Q4_0: 192 rows best at 16-24 inputs ahead, 576 rows at 14-24, 1536 rows at 8-10.
constexpr int64_t kMinAhead = 8, kMaxAhead = 16;
inline int64_t prefetch_distance(const ColumnWeights& w, int64_t r0, int64_t r1) {
  const int64_t slice = (r1 - r0) * static_cast<int64_t>(w.column_bytes) / w.n_rows;
  const int64_t n = kPrefetchBytes / (slice > 0 ? slice : 1);
  return n < kMinAhead ? kMinAhead : n > kMaxAhead ? kMaxAhead : n;
}

// Where input c's weights start (row 0). kBlock: w.block_inputs, a constant so that no
// division is left in the loops.
template <int kBlock>
inline const uint8_t* column_of(const ColumnWeights& w, int32_t c) {
  return w.data + (c / kBlock) * w.block_bytes + w.header_bytes + (c % kBlock) * w.column_bytes;
}

// The prefetch helpers are always inlined: GCC treats a function whose only effect is a
// prefetch as one without side effects and drops calls to it when it is not inlined (it did
// here, and the products ran 1.5x slower).
#define SQ_PREFETCH_HELPER inline __attribute__((always_inline))

SQ_PREFETCH_HELPER void prefetch_lines(const uint8_t* begin, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(begin + off), _MM_HINT_T0);
  }
  _mm_prefetch(reinterpret_cast<const char*>(begin + bytes - 1), _MM_HINT_T0);
}

// Prefetches what the first `ahead` active inputs need (no earlier pass prefetched them):
// their slices of rows [r0, r1), and the scales (and Q4_1's mins) of the blocks they start.
template <typename Codes, int kBlock>
SQ_PREFETCH_HELPER void prefetch_first_inputs(const ColumnWeights& w, const int32_t* idx,
                                              int64_t ahead, int64_t n_active, int64_t r0,
                                              int64_t r1) {
  const int64_t slice0 = r0 / kRows * Codes::kStepBytes;
  const int64_t slice = (r1 - r0) / kRows * Codes::kStepBytes;
  for (int64_t k = 0; k < ahead && k < n_active; ++k) {
    const int64_t b = idx[k] / kBlock;
    if (w.header_bytes != 0 && (k == 0 || idx[k - 1] / kBlock != b)) {
      const uint8_t* blk = w.data + b * w.block_bytes;
      for (size_t h = 0; h < w.header_bytes; h += 2 * static_cast<size_t>(w.n_rows)) {
        prefetch_lines(blk + h + 2 * r0, 2 * (r1 - r0));
      }
    }
    prefetch_lines(column_of<kBlock>(w, idx[k]) + slice0, slice);
  }
}

// The inputs `ahead` places after i (the last active one where the list ends), and the
// headers of the blocks that start among the first grp.n of them (the next pass takes the
// following ones). The pass streams the headers a line per step, like the weights: requested in
// one burst (96 lines for a 1536-row Q4_1 block), they made 1536-row products 1.1-1.2x slower.
template <int kBlock>
inline void set_ahead(const ColumnWeights& w, const int32_t* idx, int64_t i, int64_t n_active,
                      int64_t ahead, Group& grp) {
  for (int j = 0; j < kGroup; ++j) {
    const int64_t k = i + ahead + j;
    grp.ahead[j] = column_of<kBlock>(w, idx[k < n_active ? k : n_active - 1]);
  }
  grp.n_headers = 0;
  if (w.header_bytes == 0) return;
  for (int j = 0; j < grp.n; ++j) {
    const int64_t k = i + ahead + j;
    if (k >= n_active) break;
    const int64_t b = idx[k] / kBlock;
    if (idx[k - 1] / kBlock == b) continue;
    const uint8_t* blk = w.data + b * w.block_bytes;
    for (size_t h = 0; h < w.header_bytes; h += 2 * static_cast<size_t>(w.n_rows)) {
      grp.headers[grp.n_headers++] = blk + h;
    }
  }
}

// F16 has no scales: y itself is the accumulator.
template <typename V>
void sparse_f16(const ColumnWeights& w, const float* x, const int32_t* idx, int64_t n_active,
                int64_t r0, int64_t r1, float* y) {
  const Fold none{formats::DType::F16, nullptr, nullptr, 0.0f};
  const int64_t ahead = prefetch_distance(w, r0, r1);
  prefetch_first_inputs<typename V::F16Codes, 1>(w, idx, ahead, n_active, r0, r1);
  for (int64_t i = 0; i < n_active;) {
    Group grp;
    grp.n = group_size(n_active - i);
    for (int j = 0; j < grp.n; ++j) {
      grp.cols[j] = column_of<1>(w, idx[i + j]);
      grp.xs[j] = x[idx[i + j]];
    }
    set_ahead<1>(w, idx, i, n_active, ahead, grp);
    pass_any<V, typename V::F16Codes>(grp, i == 0, false, r0, r1, y + r0, none, y);
    i += grp.n;
  }
}

template <typename V, typename Codes>
void sparse_quantized(const ColumnWeights& w, const float* x, const int32_t* idx,
                      int64_t n_active, int64_t r0, int64_t r1, float* y, float* scratch) {
  constexpr int kBlock = 32;  // w.block_inputs
  const int64_t ahead = prefetch_distance(w, r0, r1);
  prefetch_first_inputs<Codes, kBlock>(w, idx, ahead, n_active, r0, r1);
  for (int64_t i = 0; i < n_active;) {
    // The active inputs of block b: [i, i1).
    const int64_t b = idx[i] / kBlock;
    int64_t i1 = i + 1;
    while (i1 < n_active && idx[i1] / kBlock == b) ++i1;
    const uint8_t* blk = w.data + b * w.block_bytes;
    Fold fold{w.type, reinterpret_cast<const uint16_t*>(blk),
              reinterpret_cast<const uint16_t*>(blk) + w.n_rows, 0.0f};
    for (int64_t k = i; k < i1; ++k) fold.sx += x[idx[k]];
    for (const int64_t i_block = i; i < i1;) {
      Group grp;
      grp.n = group_size(i1 - i);
      for (int j = 0; j < grp.n; ++j) {
        grp.cols[j] = blk + w.header_bytes + (idx[i + j] % kBlock) * w.column_bytes;
        grp.xs[j] = x[idx[i + j]];
      }
      set_ahead<kBlock>(w, idx, i, n_active, ahead, grp);
      pass_any<V, Codes>(grp, i == i_block, i + grp.n == i1, r0, r1, scratch, fold, y);
      i += grp.n;
    }
  }
}

// ---- Q4_0 / Q4_1: integer products (sparse_gemv.h) ----
//
// For each active block, each row tile (G 16-byte lanes, 32G rows) is one pass over the
// block's quads (4 active inputs each): the 4 inputs' bytes of the tile are interleaved into
// 32-bit lanes of 4 codes (one row each, the layout makes them consecutive rows), the low and
// high nibbles multiplied with the 4 broadcast xq and summed into 8 integer accumulators that
// stay in registers for the whole block; then they are folded into y with the block's scales.
// I provides the ISA part:
//   template <int G> static void tile(const uint8_t* cols, size_t column_bytes,
//                                     const SparseQuad* q, int64_t nq, int64_t t,
//                                     const Q4Fold& f, float* y)
// (tile of G lanes at row t, all quads of one block) built from q4_subtile below with an
// integer traits type T:
//   I (integer vector of W 16-byte lanes), F (float vector of 4W lanes), Acc; load(p) (16W
//   bytes), unpacklo8/unpackhi8/unpacklo16/unpackhi16, and_(a, b), srli16_4(a), set1_8,
//   set1_32, acc_zero(), dot(Acc, I u8 codes, I s8 xq) -> Acc (4 products summed per 32-bit
//   lane), to_i32(Acc) -> I, sub32, cvt(I) -> F, halves(const uint16_t*) -> F, loadf, storef,
//   addf, mulf, fmaddf(a, b, c) = a*b + c fused, set1f.

// A block's scales and input sums: y[r] = fma(d[r] * s, float(acc[r] - corr), y[r]), for Q4_1
// first y[r] = fma(m[r], S, y[r]) (fused: 3 operations fewer per vector than separate
// multiplies and adds).
struct Q4Fold {
  const uint16_t* d;
  const uint16_t* m;  // Q4_1's mins, else nullptr
  float s;            // the input block's scale
  int32_t corr;       // Q4_0: 8 * the block's xq sum; Q4_1: 0
  float S;            // Q4_1: the input block's scaled sum
};

// Lanes [g0, g0 + W) of a tile of G lanes at row t (W: T's width), all quads of one block.
template <typename T, int G>
inline void q4_subtile(const uint8_t* cols, size_t cb, const SparseQuad* q, int64_t nq,
                       int64_t t, int g0, const Q4Fold& f, float* y) {
  using I = typename T::I;
  using F = typename T::F;
  typename T::Acc acc[8];
  for (auto& a : acc) a = T::acc_zero();
  const I mask = T::set1_8(0x0F);
  const int64_t byte0 = t / 2 + 16 * g0;
  for (int64_t n = 0; n < nq; ++n) {
    const SparseQuad& qq = q[n];
    const I a = T::load(cols + qq.j[0] * cb + byte0);
    const I b = T::load(cols + qq.j[1] * cb + byte0);
    const I c = T::load(cols + qq.j[2] * cb + byte0);
    const I d = T::load(cols + qq.j[3] * cb + byte0);
    const I ab_lo = T::unpacklo8(a, b), ab_hi = T::unpackhi8(a, b);
    const I cd_lo = T::unpacklo8(c, d), cd_hi = T::unpackhi8(c, d);
    const I u[4] = {T::unpacklo16(ab_lo, cd_lo), T::unpackhi16(ab_lo, cd_lo),
                    T::unpacklo16(ab_hi, cd_hi), T::unpackhi16(ab_hi, cd_hi)};
    const I xv = T::set1_32(qq.xq4);
    for (int i = 0; i < 4; ++i) {
      acc[2 * i] = T::dot(acc[2 * i], T::and_(u[i], mask), xv);
      acc[2 * i + 1] = T::dot(acc[2 * i + 1], T::and_(T::srli16_4(u[i]), mask), xv);
    }
  }
  const F vs = T::set1f(f.s);
  for (int i = 0; i < 4; ++i) {
    for (int nib = 0; nib < 2; ++nib) {
      const int64_t r = t + 8 * G * i + 4 * G * nib + 4 * g0;
      I v = T::to_i32(acc[2 * i + nib]);
      if (f.corr != 0) v = T::sub32(v, T::set1_32(f.corr));
      F yv = T::loadf(y + r);
      if (f.m != nullptr) yv = T::fmaddf(T::halves(f.m + r), T::set1f(f.S), yv);
      T::storef(y + r, T::fmaddf(T::mulf(T::halves(f.d + r), vs), T::cvt(v), yv));
    }
  }
}

// The lanes of the row tile at t (a tile start): 4 (128 rows), 2 or 1.
inline int q4_tile_lanes(int64_t n_rows, int64_t t) {
  const int64_t full = n_rows / 128 * 128;
  if (t < full) return 4;
  return n_rows - t >= 64 ? 2 : 1;
}

// How many active blocks ahead to prefetch: about kQ4PrefetchBytes of weights and scales.
constexpr int64_t kQ4PrefetchBytes = 6144;
constexpr int64_t kQ4MaxAhead = 4;

template <typename I>
void sparse_q4_int(const ColumnWeights& w, const SparseInput& in, int64_t k0, int64_t k1,
                   int64_t r0, int64_t r1, float* y) {
  for (int64_t r = r0; r < r1; r += 4) _mm_storeu_ps(y + r, _mm_setzero_ps());
  if (k1 <= k0) return;
  const bool q41 = w.type == formats::DType::Q4_1;
  const size_t cb = w.column_bytes;
  // Bytes of one block's rows [r0, r1): weights of its active inputs and scales.
  const int64_t n_in = in.block_first[k1] - in.block_first[k0];
  const int64_t per_block = (n_in / (k1 - k0)) * (r1 - r0) / 2 + (q41 ? 4 : 2) * (r1 - r0);
  int64_t ahead = kQ4PrefetchBytes / (per_block > 0 ? per_block : 1);
  ahead = ahead < 1 ? 1 : ahead > kQ4MaxAhead ? kQ4MaxAhead : ahead;
  const int64_t header_rows = q41 ? 2 : 1;  // d (and m) arrays
  // The first blocks: nothing prefetched them.
  for (int64_t k = k0; k < k0 + ahead && k < k1; ++k) {
    const uint8_t* blk = w.data + in.blocks[k] * w.block_bytes;
    for (int64_t h = 0; h < header_rows; ++h) {
      prefetch_lines(blk + h * 2 * w.n_rows + 2 * r0, 2 * (r1 - r0));
    }
    for (int64_t n = in.block_quad[k]; n < in.block_quad[k + 1]; ++n) {
      for (int l = 0; l < 4; ++l) {
        prefetch_lines(blk + w.header_bytes + in.quads[n].j[l] * cb + r0 / 2, (r1 - r0) / 2);
      }
    }
  }
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t b = in.blocks[k];
    const uint8_t* blk = w.data + b * w.block_bytes;
    const uint8_t* cols = blk + w.header_bytes;
    const auto* d = reinterpret_cast<const uint16_t*>(blk);
    const Q4Fold fold{d, q41 ? d + w.n_rows : nullptr, in.scale[b], q41 ? 0 : 8 * in.qsum[b],
                      in.qsum_s[b]};
    const SparseQuad* q = in.quads.data() + in.block_quad[k];
    const int64_t nq = in.block_quad[k + 1] - in.block_quad[k];
    // The block `ahead` places on, whose same tile is prefetched with each tile.
    const int64_t ka = k + ahead;
    const uint8_t* blk_a = ka < k1 ? w.data + in.blocks[ka] * w.block_bytes : nullptr;
    const SparseQuad* qa = ka < k1 ? in.quads.data() + in.block_quad[ka] : nullptr;
    const int64_t nqa = ka < k1 ? in.block_quad[ka + 1] - in.block_quad[ka] : 0;
    for (int64_t t = r0; t < r1;) {
      const int g = q4_tile_lanes(w.n_rows, t);
      if (blk_a != nullptr) {
        // The scales of 32 g rows: g whole lines (each scale array starts on a line). An
        // input's 16 g bytes: its first line only, but at the last tile also its last byte's:
        // when the bytes straddle two lines, the second is the next tile's first.
        for (int64_t h = 0; h < header_rows; ++h) {
          const uint8_t* p = blk_a + h * 2 * w.n_rows + 2 * t;
          for (int l = 0; l < g; ++l) _mm_prefetch(reinterpret_cast<const char*>(p + 64 * l), _MM_HINT_T0);
        }
        const uint8_t* cols_a = blk_a + w.header_bytes + t / 2;
        if (t + 32 * g < r1) {
          for (int64_t n = 0; n < nqa; ++n) {
            for (int l = 0; l < 4; ++l) {
              _mm_prefetch(reinterpret_cast<const char*>(cols_a + qa[n].j[l] * cb), _MM_HINT_T0);
            }
          }
        } else {
          for (int64_t n = 0; n < nqa; ++n) {
            for (int l = 0; l < 4; ++l) prefetch_lines(cols_a + qa[n].j[l] * cb, 16 * g);
          }
        }
      }
      if (g == 4) {
        I::template tile<4>(cols, cb, q, nq, t, fold, y);
      } else if (g == 2) {
        I::template tile<2>(cols, cb, q, nq, t, fold, y);
      } else {
        I::template tile<1>(cols, cb, q, nq, t, fold, y);
      }
      t += 32 * g;
    }
  }
}

// The kernel (SparseGemvFn) on V (float) and Q4 (integer).
template <typename V, typename Q4>
void sparse_gemv_simd(const ColumnWeights& w, const SparseInput& in, int64_t k0, int64_t k1,
                      int64_t r0, int64_t r1, float* y, float* scratch) {
  if (w.type == formats::DType::Q4_0 || w.type == formats::DType::Q4_1) {
    sparse_q4_int<Q4>(w, in, k0, k1, r0, r1, y);
    return;
  }
  const int64_t i0 = in.block_first[k0], n_active = in.block_first[k1] - i0;
  const int32_t* idx = in.idx + i0;
  if (w.type != formats::DType::F16 || n_active == 0) {
    for (int64_t r = r0; r < r1; r += V::kLanes) V::store(y + r, V::zero());
  }
  if (w.type == formats::DType::F16) {
    sparse_f16<V>(w, in.x, idx, n_active, r0, r1, y);
  } else {
    sparse_quantized<V, typename V::Q8Codes>(w, in.x, idx, n_active, r0, r1, y, scratch);
  }
}

#undef SQ_PREFETCH_HELPER

}  // namespace
}  // namespace squeeze::ops
