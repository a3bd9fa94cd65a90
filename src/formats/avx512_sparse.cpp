// AVX-512 + VBMI2 products of the packed sparse format SP8_50 (sparse.h) with Q8_0
// activations: the block order of scalar::vec_dot_sp8_50, bit for bit. Each row's mask picks
// its 16 activation bytes out of the block's 32 with one byte compress (two rows per compress),
// so the weights' 16 codes meet their activations without the zeros ever being read.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "formats/avx512_util.h"
#include "formats/blocks.h"
#include "formats/kernel_list.h"
#include "formats/sparse.h"

namespace squeeze::formats::avx512 {
namespace {

constexpr int kRows8[8] = {0, 1, 2, 3, 4, 5, 6, 7};
// Batches of at least this many tokens expand kExpandRows rows at a time to q8_0.
constexpr int64_t kExpandTokens = 4;
constexpr int64_t kExpandRows = 64;
constexpr size_t kCodes = offsetof(BlockSp8, qs);
constexpr size_t kScale = offsetof(BlockSp8, d);

// Four rows' 16 codes (rows at p, p + ws, ...) in the four 128-bit lanes.
inline __m512i load_rows4(const uint8_t* p, size_t ws) {
  __m512i v = _mm512_castsi128_si512(load16(p));
  v = _mm512_inserti32x4(v, load16(p + ws), 1);
  v = _mm512_inserti32x4(v, load16(p + 2 * ws), 2);
  return _mm512_inserti32x4(v, load16(p + 3 * ws), 3);
}

// Four partial int sums per 128-bit lane of w (codes, signed) times x (activations, signed),
// from xu = x + 128 (unsigned, as dpbusd takes it): (x + 128) w - 128 w, four products each.
inline __m512i lane_dots(__m512i w, __m512i xu) {
  const __m512i z = _mm512_dpbusd_epi32(_mm512_setzero_si512(), xu, w);
  const __m512i c = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), w);
  return _mm512_sub_epi32(z, c);
}

// The eight rows' sums, rows 0-3 from the lanes of a, rows 4-7 from those of b, in row order.
inline __m256i row_sums8(__m512i a, __m512i b) {
  // Per lane k: [a0 + a2, b0 + b2, a1 + a3, b1 + b3], then [A, B, A, B].
  __m512i s = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_BADC));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, s));
}

inline uint64_t load_mask(const uint8_t* p) {
  uint32_t m;
  std::memcpy(&m, p, sizeof m);
  return m;
}

// Rows r .. r + 7 (at w, stride ws) times one token's activations xq: y[0..8).
void rows8(int64_t nb, const uint8_t* w, size_t ws, const BlockQ8_0* xq, float* y) {
  const __m256i offs = row_offsets(ws, kRows8);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const TilePrefetch prefetch(w, 8 * ws, nb);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch.at(i);
    const uint8_t* blk = w + i * sizeof(BlockSp8);
    const __m512i x2 = _mm512_broadcast_i64x4(_mm256_xor_si256(load32(xq[i].qs), flip));
    // Rows 2k and 2k + 1 in one compress: their masks side by side over the two copies of x.
    __m256i c[4];
    for (int p = 0; p < 4; ++p) {
      const uint64_t k = load_mask(blk + 2 * p * ws) | load_mask(blk + (2 * p + 1) * ws) << 32;
      c[p] = _mm512_castsi512_si256(_mm512_maskz_compress_epi8(_cvtu64_mask64(k), x2));
    }
    const __m512i xa = _mm512_inserti64x4(_mm512_castsi256_si512(c[0]), c[1], 1);
    const __m512i xb = _mm512_inserti64x4(_mm512_castsi256_si512(c[2]), c[3], 1);
    const __m512i za = lane_dots(load_rows4(blk + kCodes, ws), xa);
    const __m512i zb = lane_dots(load_rows4(blk + 4 * ws + kCodes, ws), xb);
    const __m256i sums = row_sums8(za, zb);
    __m256i raw;
    const __m256 dw = gather_halves(blk + kScale, offs, &raw);
    const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(half_to_float(xq[i].d)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), d, acc);
  }
  _mm256_storeu_ps(y, acc);
}

}  // namespace

void gemm_sp8_50(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
                 int64_t n_tokens, float* y, int64_t ys) {
  const int64_t nb = n / kBlock32;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  if (n_tokens >= kExpandTokens) {
    // A batch: rows expanded to q8_0 a few at a time (one byte expand per block) and multiplied
    // by q8_0's block-order kernel, whose sums are this format's (sparse.h); the expansion is
    // shared by every token.
    const size_t qrb = static_cast<size_t>(nb) * sizeof(BlockQ8_0);
    thread_local std::vector<uint8_t> tile;
    tile.resize(kExpandRows * qrb);
    for (int64_t r0 = 0; r0 < n_rows; r0 += kExpandRows) {
      const int64_t rows = std::min(kExpandRows, n_rows - r0);
      for (int64_t r = 0; r < rows; ++r) {
        const auto* src = reinterpret_cast<const BlockSp8*>(wb + (r0 + r) * ws);
        auto* dst = reinterpret_cast<BlockQ8_0*>(tile.data() + r * qrb);
        for (int64_t i = 0; i < nb; ++i) {
          const auto k = static_cast<__mmask32>(load_mask(src[i].mask));
          const __m256i codes = _mm256_castsi128_si256(load16(reinterpret_cast<const uint8_t*>(src[i].qs)));
          dst[i].d = src[i].d;
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst[i].qs), _mm256_maskz_expand_epi8(k, codes));
        }
      }
      gemm_q8_0_blocks(n, tile.data(), qrb, rows, x, xs, n_tokens, y + r0, ys);
    }
    return;
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto* xq = reinterpret_cast<const BlockQ8_0*>(xb + t * xs);
    int64_t r = 0;
    for (; r + 8 <= n_rows; r += 8) rows8(nb, wb + r * ws, ws, xq, y + t * ys + r);
    for (; r < n_rows; ++r) y[t * ys + r] = scalar::vec_dot_sp8_50(n, wb + r * ws, xq);
  }
}

}  // namespace squeeze::formats::avx512
