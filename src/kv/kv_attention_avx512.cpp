// The AVX-512 twin of decode attention over a quantized cache (kv_attention.h): codes unpacked
// 16 at a time, the float loops widened by the compiler.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kv/kv_attention_impl.h"
#include "kv/kv_quant.h"

namespace squeeze::kv::detail {
namespace {

// Sixteen codes of `bits` starting at a byte boundary, as 32-bit lanes.
inline __m512i sixteen_codes(const uint8_t* p, int bits) {
  if (bits == 8) return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  if (bits == 4) {  // byte k: code 2k in its low nibble, 2k + 1 in its high one
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i m = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
  }
  uint32_t w;  // 2 bits: code i at bits 2i..2i+1 of four bytes
  std::memcpy(&w, p, 4);
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  return _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(w)), shifts),
                          _mm512_set1_epi32(3));
}

// Sixteen codes as floats: the codes, or their levels (a 16-float table).
inline __m512 sixteen_floats(const uint8_t* p, int bits, const float* levels) {
  const __m512i c = sixteen_codes(p, bits);
  return levels != nullptr ? _mm512_permutexvar_ps(c, _mm512_loadu_ps(levels)) : _mm512_cvtepi32_ps(c);
}

void unpack_codes(const uint8_t* codes, int64_t first, int64_t n, int bits, const float* levels, float* out) {
  int64_t i = 0;
  if ((first * bits) % 8 == 0) {
    const uint8_t* p = codes + first * bits / 8;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, sixteen_floats(p + i * bits / 8, bits, levels));
  }
  for (; i < n; ++i) out[i] = code_value(codes, first + i, bits, levels);
}

// A frozen block's scores with keys per channel, all B tokens at once: each head's B scores in
// B / 16 registers while the block's columns go by (each column's codes widened once for the
// unit's heads). Multiplies and adds kept apart: the same floats as attend_unit's loops.
bool fast_keys(const UnitShape& s, const FrozenBlock& f, const Unit& u, int64_t c0, float* s_block,
               int64_t n) {
  const int64_t B = s.block, nv = B / 16;
  if (B % 16 != 0 || nv > 4 || u.n_q * nv > 16) return false;
  __m512 acc[16];
  for (int h = 0; h < u.n_q; ++h) {
    const float* q = u.q + u.heads[h] * s.hd;
    float base = 0;
    for (int64_t d = 0; d < s.hd; ++d) base += q[d] * f16_to_f32(f.k_params[c0 + d].min);
    for (int64_t v = 0; v < nv; ++v) acc[h * nv + v] = _mm512_set1_ps(base);
  }
  __m512 x[4];
  for (int64_t d = 0; d < s.hd; ++d) {
    const uint8_t* col = f.k_codes + (c0 + d) * f.k_stride;
    for (int64_t v = 0; v < nv; ++v) x[v] = sixteen_floats(col + v * 2 * s.bits, s.bits, f.k_levels);
    const float scale = f16_to_f32(f.k_params[c0 + d].scale);
    for (int h = 0; h < u.n_q; ++h) {
      const __m512 w = _mm512_set1_ps(u.q[u.heads[h] * s.hd + d] * scale);
      for (int64_t v = 0; v < nv; ++v) acc[h * nv + v] = _mm512_add_ps(acc[h * nv + v], _mm512_mul_ps(w, x[v]));
    }
  }
  const __m512 scale = _mm512_set1_ps(s.scale);
  for (int h = 0; h < u.n_q; ++h) {
    for (int64_t v = 0; v < nv; ++v) _mm512_storeu_ps(s_block + h * n + v * 16, _mm512_mul_ps(scale, acc[h * nv + v]));
  }
  return true;
}

// A frozen block's values (per token) added into o: the unit's heads' sums in registers while
// the block's tokens go by, each token's codes widened once; 16 columns never straddle a group.
bool fast_values(const UnitShape& s, const FrozenBlock& f, const Unit& u, int64_t c0, int64_t t0,
                 int64_t t1, const float* p_block, int64_t n, float* o, float* cst, int64_t n_groups) {
  const int64_t nv = s.hd / 16;
  if (s.hd % 16 != 0 || s.group % 16 != 0 || u.n_q * nv > 16) return false;
  const int64_t per_row = s.row / s.group, g0 = c0 / s.group;
  __m512 acc[16], x[16];
  int64_t g_of[16];  // vector v's group, from the head's first
  for (int64_t v = 0; v < nv; ++v) g_of[v] = (c0 + v * 16) / s.group - g0;
  for (int h = 0; h < u.n_q; ++h) {
    for (int64_t v = 0; v < nv; ++v) acc[h * nv + v] = _mm512_loadu_ps(o + h * s.hd + v * 16);
  }
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* row = f.v_codes + t * f.v_stride + c0 * s.bits / 8;
    for (int64_t v = 0; v < nv; ++v) x[v] = sixteen_floats(row + v * 2 * s.bits, s.bits, f.v_levels);
    const QuantParams* gp = f.v_params + t * per_row + g0;
    for (int h = 0; h < u.n_q; ++h) {
      const float p = p_block[h * n + t];
      __m512 w[16];
      for (int64_t g = 0; g < n_groups; ++g) {
        w[g] = _mm512_set1_ps(p * f16_to_f32(gp[g].scale));
        cst[h * n_groups + g] += p * f16_to_f32(gp[g].min);
      }
      for (int64_t v = 0; v < nv; ++v) acc[h * nv + v] = _mm512_add_ps(acc[h * nv + v], _mm512_mul_ps(w[g_of[v]], x[v]));
    }
  }
  for (int h = 0; h < u.n_q; ++h) {
    for (int64_t v = 0; v < nv; ++v) _mm512_storeu_ps(o + h * s.hd + v * 16, acc[h * nv + v]);
  }
  return true;
}

#define KV_FAST_BLOCKS
#include "kv/kv_attention_unit.h"

}  // namespace

void attend_units_avx512(const UnitShape& s, std::span<const Unit> units, int64_t per_thread,
                         ThreadPool& pool, float* scratch) {
  run_units(s, units, per_thread, pool, scratch);
}

}  // namespace squeeze::kv::detail
