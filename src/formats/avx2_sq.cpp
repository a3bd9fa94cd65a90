// AVX2 kernels of the sq{B}_g{G} formats: decoding (bit-identical to scalar_sq.cpp) and dot
// products with Q8_1 activations (maddubs on the unpacked codes, as the Q4_1 kernel), summed in
// exactly the scalar twin's order, so both paths give the same bits. The tiled products (gemm)
// are in avx2_gemm.cpp and avx512_gemm.cpp.
#include "formats/avx2_util.h"
#include "formats/blocks.h"
#include "formats/format.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::avx2 {
namespace {

constexpr size_t kHeaderBytes = 4;  // half d, half m

template <int B, int G>
constexpr size_t kBlockBytes = kHeaderBytes + static_cast<size_t>(G * B / 8);

inline float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return half_to_float(h);
}

// Two adjacent halves (a block's d, m; a Q8_1 block's d, s) as floats in lanes 0 and 1: one
// conversion for both, where two scalar ones would cost the dot product a third of its time.
inline __m128 load_half_pair(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(v));
}

// d * q + m: multiply, then add, as the scalar code (no FMA: results must match).
template <int B, int G>
void dequantize_sq(const void* src, float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (int64_t g = 0; g < n / G; ++g, p += kBlockBytes<B, G>) {
    const __m256 d = _mm256_set1_ps(load_half(p));
    const __m256 m = _mm256_set1_ps(load_half(p + 2));
    for (int k = 0; k < G / 32; ++k) {
      const __m256i q = sq_sub_block_codes<B>(p + kHeaderBytes + 4 * B * k);
      float* y = dst + g * G + 32 * k;
      for (int c = 0; c < 4; ++c) {
        _mm256_storeu_ps(y + 8 * c, _mm256_add_ps(_mm256_mul_ps(i8_chunk_to_ps(q, c), d), m));
      }
    }
  }
}

// One sub-block of a group (dm = its d, m in lanes 0, 1) against one Q8_1 block:
// acc += (d * d_x) * (8 lanes of 4 exact int products), lane 1 of mins += m * s_x (lane 0
// gathers unused sums of d * d_x).
template <int B>
inline void add_sub_block(const uint8_t* codes, __m128 dm, const BlockQ8_1& y, __m256& acc,
                          __m128& mins) {
  const __m256i prod = dot_u8_i8(sq_sub_block_codes<B>(codes),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs)));
  const __m128 scales = _mm_mul_ps(dm, load_half_pair(&y.d));  // d * d_x, m * s_x
  acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(scales), _mm256_cvtepi32_ps(prod), acc);
  mins = _mm_add_ps(mins, scales);
}

inline float lane1(__m128 v) { return _mm_cvtss_f32(_mm_movehdup_ps(v)); }

// Sub-block s of the row goes to accumulator (and min sum) s % 2: two dependency chains, so the
// fused multiply-add's latency does not bound the loop.
template <int B, int G>
float vec_dot_sq(int64_t n, const void* w, const void* x) {
  constexpr int kSubs = G / 32;
  const uint8_t* a = static_cast<const uint8_t*>(w);
  const BlockQ8_1* b = static_cast<const BlockQ8_1*>(x);
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  __m128 mins0 = _mm_setzero_ps();
  __m128 mins1 = _mm_setzero_ps();
  const int64_t n_groups = n / G;
  if constexpr (kSubs == 1) {
    // One sub-block per group: the two chains take alternate groups.
    int64_t g = 0;
    for (; g + 1 < n_groups; g += 2) {
      const uint8_t* p = a + g * kBlockBytes<B, G>;
      const uint8_t* q = p + kBlockBytes<B, G>;
      add_sub_block<B>(p + kHeaderBytes, load_half_pair(p), b[g], acc0, mins0);
      add_sub_block<B>(q + kHeaderBytes, load_half_pair(q), b[g + 1], acc1, mins1);
    }
    if (g < n_groups) {
      const uint8_t* p = a + g * kBlockBytes<B, G>;
      add_sub_block<B>(p + kHeaderBytes, load_half_pair(p), b[g], acc0, mins0);
    }
  } else {
    // An even number of sub-blocks per group: the chains take alternate sub-blocks.
    for (int64_t g = 0; g < n_groups; ++g, a += kBlockBytes<B, G>, b += kSubs) {
      const __m128 dm = load_half_pair(a);
      const uint8_t* codes = a + kHeaderBytes;
      for (int k = 0; k < kSubs; k += 2) {
        add_sub_block<B>(codes + 4 * B * k, dm, b[k], acc0, mins0);
        add_sub_block<B>(codes + 4 * B * (k + 1), dm, b[k + 1], acc1, mins1);
      }
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1)) + (lane1(mins0) + lane1(mins1));
}

template <int B, int G>
void set_kernels(Kernels& k) {
  k.dequantize_row = dequantize_sq<B, G>;
  k.vec_dot = vec_dot_sq<B, G>;
}

}  // namespace

void sq_kernels(DType t, Kernels& k) {
  switch (t) {
    case DType::SQ2_G32: return set_kernels<2, 32>(k);
    case DType::SQ2_G64: return set_kernels<2, 64>(k);
    case DType::SQ2_G128: return set_kernels<2, 128>(k);
    case DType::SQ3_G32: return set_kernels<3, 32>(k);
    case DType::SQ3_G64: return set_kernels<3, 64>(k);
    case DType::SQ3_G128: return set_kernels<3, 128>(k);
    case DType::SQ4_G32: return set_kernels<4, 32>(k);
    case DType::SQ4_G64: return set_kernels<4, 64>(k);
    case DType::SQ4_G128: return set_kernels<4, 128>(k);
    default: return;
  }
}

}  // namespace squeeze::formats::avx2
