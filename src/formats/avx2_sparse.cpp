// AVX2 products of the packed sparse format SP8_50 (sparse.h) with Q8_0 activations, in the
// block order of scalar::vec_dot_sp8_50, bit for bit. A block's 16 codes are expanded to their
// 32 positions inside a register (one byte shuffle, its control from a table of the mask's
// four bytes), then multiplied as Q8_0's codes are: the zeros are never read from memory.
// Eight rows per token share each activation block; batches expand tiles of rows to Q8_0 once
// and run the same block-order loop on them.
#include "formats/avx2_util.h"
#include "formats/blocks.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx2 {
namespace {

// For a mask byte b: ctrl, the shuffle control of its 8 positions (a kept position's index
// among the byte's kept codes, 0x80 for a dropped one, which the shuffle turns into zero), and
// count, its kept codes.
struct ExpandTable {
  uint64_t ctrl[256];
  uint8_t count[256];
};

constexpr ExpandTable make_expand_table() {
  ExpandTable t{};
  for (int b = 0; b < 256; ++b) {
    uint64_t ctrl = 0;
    int k = 0;
    for (int j = 0; j < 8; ++j) {
      const uint64_t byte = (b >> j & 1) != 0 ? static_cast<uint64_t>(k++) : 0x80u;
      ctrl |= byte << (8 * j);
    }
    t.ctrl[b] = ctrl;
    t.count[b] = static_cast<uint8_t>(k);
  }
  return t;
}

constexpr ExpandTable kExpand = make_expand_table();
constexpr int64_t kExpandTokens = 4;  // batches of at least this many tokens expand tiles
constexpr int64_t kExpandRows = 64;

// A thread's tile of expanded rows (no std::vector: see avx2_util.h on templates in AVX2 units).
struct Tile {
  uint8_t* data = nullptr;
  size_t size = 0;
  uint8_t* get(size_t n) {
    if (n > size) {
      delete[] data;
      data = new uint8_t[n];
      size = n;
    }
    return data;
  }
  ~Tile() { delete[] data; }
};

// The block's 32 codes in position order (zeros where the mask drops one). Adding a byte's
// offset (the kept codes before it, at most 16) keeps the dropped positions' high bit set.
static inline __m256i expand_codes(const BlockSp8& b) {
  uint32_t m;
  std::memcpy(&m, b.mask, sizeof m);
  const unsigned b0 = m & 0xFF, b1 = m >> 8 & 0xFF, b2 = m >> 16 & 0xFF, b3 = m >> 24;
  const uint64_t o1 = kExpand.count[b0], o2 = o1 + kExpand.count[b1], o3 = o2 + kExpand.count[b2];
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  const __m256i ctrl = _mm256_setr_epi64x(static_cast<long long>(kExpand.ctrl[b0]),
                                          static_cast<long long>(kExpand.ctrl[b1] + o1 * kOnes),
                                          static_cast<long long>(kExpand.ctrl[b2] + o2 * kOnes),
                                          static_cast<long long>(kExpand.ctrl[b3] + o3 * kOnes));
  const __m256i codes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)));
  return _mm256_shuffle_epi8(codes, ctrl);
}

// A row's block as 32 codes and its scale: SP8_50 (expanded) or Q8_0 (an expanded tile).
struct Sp8Rows {
  static __m256i codes(const uint8_t* p) { return expand_codes(*reinterpret_cast<const BlockSp8*>(p)); }
  static uint16_t scale(const uint8_t* p) { return reinterpret_cast<const BlockSp8*>(p)->d; }
  static constexpr size_t kBytes = sizeof(BlockSp8);
};
struct Q8Rows {
  static __m256i codes(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const BlockQ8_0*>(p)->qs));
  }
  static uint16_t scale(const uint8_t* p) { return reinterpret_cast<const BlockQ8_0*>(p)->d; }
  static constexpr size_t kBytes = sizeof(BlockQ8_0);
};

// The 8 rows' totals of 8 vectors of 8 partial int32 sums each, in row order (exact).
static inline __m256i row_totals8(const __m256i p[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// Rows r .. r + 7 (at w, stride ws) times one token's activations: y[0..8), each row's blocks
// fused-multiply-added in order as the scalar kernel does.
template <class Rows>
void rows8(int64_t nb, const uint8_t* w, size_t ws, const BlockQ8_0* xq, float* y) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[i].qs));
    __m256i p[8];
    alignas(16) uint16_t d[8];
    for (int r = 0; r < 8; ++r) {
      const uint8_t* blk = w + r * ws + i * Rows::kBytes;
      p[r] = dot_i8_i8(Rows::codes(blk), x);
      d[r] = Rows::scale(blk);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d)));
    const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(half_to_float(xq[i].d)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(row_totals8(p)), dd, acc);
  }
  _mm256_storeu_ps(y, acc);
}

template <class Rows>
float row1(int64_t nb, const uint8_t* w, const BlockQ8_0* xq) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* blk = w + i * Rows::kBytes;
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[i].qs));
    const float sumi = static_cast<float>(hsum(dot_i8_i8(Rows::codes(blk), x)));
    const float d = half_to_float(Rows::scale(blk)) * half_to_float(xq[i].d);
    acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(sumi), _mm_set_ss(d), _mm_set_ss(acc)));
  }
  return acc;
}

template <class Rows>
void rows_times_tokens(int64_t nb, const uint8_t* w, size_t ws, int64_t n_rows, const uint8_t* x,
                       size_t xs, int64_t n_tokens, float* y, int64_t ys) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const auto* xq = reinterpret_cast<const BlockQ8_0*>(x + t * xs);
    int64_t r = 0;
    for (; r + 8 <= n_rows; r += 8) rows8<Rows>(nb, w + r * ws, ws, xq, y + t * ys + r);
    for (; r < n_rows; ++r) y[t * ys + r] = row1<Rows>(nb, w + r * ws, xq);
  }
}

}  // namespace

float vec_dot_sp8_50(int64_t n, const void* w, const void* x) {
  return row1<Sp8Rows>(n / kBlock32, static_cast<const uint8_t*>(w), static_cast<const BlockQ8_0*>(x));
}

void gemm_sp8_50(int64_t n, const void* w, size_t ws, int64_t n_rows, const void* x, size_t xs,
                 int64_t n_tokens, float* y, int64_t ys) {
  const int64_t nb = n / kBlock32;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  if (n_tokens < kExpandTokens) {
    rows_times_tokens<Sp8Rows>(nb, wb, ws, n_rows, xb, xs, n_tokens, y, ys);
    return;
  }
  // A batch: tiles of rows expanded to Q8_0 once, shared by every token.
  const size_t qrb = static_cast<size_t>(nb) * sizeof(BlockQ8_0);
  thread_local Tile tile_buffer;
  uint8_t* tile = tile_buffer.get(kExpandRows * qrb);
  for (int64_t r0 = 0; r0 < n_rows; r0 += kExpandRows) {
    const int64_t rows = n_rows - r0 < kExpandRows ? n_rows - r0 : kExpandRows;
    for (int64_t r = 0; r < rows; ++r) {
      const auto* src = reinterpret_cast<const BlockSp8*>(wb + (r0 + r) * ws);
      auto* dst = reinterpret_cast<BlockQ8_0*>(tile + r * qrb);
      for (int64_t i = 0; i < nb; ++i) {
        dst[i].d = src[i].d;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst[i].qs), expand_codes(src[i]));
      }
    }
    rows_times_tokens<Q8Rows>(nb, tile, qrb, rows, xb, xs, n_tokens, y + r0, ys);
  }
}

}  // namespace squeeze::formats::avx2
