// Scalar code of squeeze's sq{B}_g{G} formats: the packing API of sq.h and the reference
// kernels. Layout (docs/FORMATS.md, "squeeze's formats"): a block is one group of G elements,
// {half d; half m; G / 32 sub-blocks of 4 * B bytes}; x = d * q + m.
#include <algorithm>
#include <cfloat>
#include <cstring>
#include <string>

#include "core/error.h"
#include "formats/blocks.h"
#include "formats/kernel_list.h"
#include "formats/lanes.h"
#include "formats/rounding.h"
#include "formats/sq.h"

namespace squeeze::formats {
namespace {

constexpr int kSub = static_cast<int>(kSqSubBlock);
constexpr size_t kHeaderBytes = 2 * sizeof(f16_t);  // d, m

constexpr size_t sub_block_bytes(int bits) { return static_cast<size_t>(4 * bits); }

// 32 codes -> 4 * bits bytes. 2 bits: byte j < 8 holds q[j], q[j + 8], q[j + 16], q[j + 24] at
// bits 0, 2, 4, 6. 3 bits: the low 2 bits so in bytes 0..7, then bit c of byte 8 + j (j < 4)
// is bit 2 of q[j + 4c]. 4 bits: byte j < 16 holds q[j] (low nibble) and q[j + 16] (high).
// So AVX2 decodes a sub-block in element order with one broadcast load, one shift per 64-bit
// (3-bit high bits: 32-bit) lane and a mask (avx2_sq.cpp).
void pack_sub_block(int bits, const uint8_t* q, uint8_t* out) {
  if (bits == 4) {
    for (int j = 0; j < 16; ++j) out[j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 16] & 15) << 4);
    return;
  }
  for (int j = 0; j < 8; ++j) {
    out[j] = static_cast<uint8_t>((q[j] & 3) | (q[j + 8] & 3) << 2 | (q[j + 16] & 3) << 4 |
                                  (q[j + 24] & 3) << 6);
  }
  if (bits == 3) {
    for (int j = 0; j < 4; ++j) {
      int high = 0;
      for (int c = 0; c < 8; ++c) high |= ((q[j + 4 * c] >> 2) & 1) << c;
      out[8 + j] = static_cast<uint8_t>(high);
    }
  }
}

void unpack_sub_block(int bits, const uint8_t* in, uint8_t* q) {
  if (bits == 4) {
    for (int j = 0; j < 16; ++j) {
      q[j] = in[j] & 15;
      q[j + 16] = in[j] >> 4;
    }
    return;
  }
  for (int j = 0; j < 8; ++j) {
    for (int c = 0; c < 4; ++c) q[j + 8 * c] = (in[j] >> (2 * c)) & 3;
  }
  if (bits == 3) {
    for (int j = 0; j < 4; ++j) {
      for (int c = 0; c < 8; ++c) q[j + 4 * c] |= static_cast<uint8_t>(((in[8 + j] >> c) & 1) << 2);
    }
  }
}

void pack_block(int bits, int64_t group, float d, float m, const uint8_t* codes, uint8_t* dst) {
  const f16_t h[2] = {f32_to_f16(d), f32_to_f16(m)};
  std::memcpy(dst, h, kHeaderBytes);
  for (int64_t k = 0; k < group / kSub; ++k) {
    pack_sub_block(bits, codes + k * kSub, dst + kHeaderBytes + k * sub_block_bytes(bits));
  }
}

void unpack_block(int bits, int64_t group, const uint8_t* src, uint8_t* codes, float* d,
                  float* m) {
  f16_t h[2];
  std::memcpy(h, src, kHeaderBytes);
  *d = f16_to_f32(h[0]);
  *m = f16_to_f32(h[1]);
  for (int64_t k = 0; k < group / kSub; ++k) {
    unpack_sub_block(bits, src + kHeaderBytes + k * sub_block_bytes(bits), codes + k * kSub);
  }
}

std::string type_name(DType t) {
  const FormatInfo* info = format_info(static_cast<uint32_t>(t));
  return info != nullptr ? std::string(info->name)
                         : "type id " + std::to_string(static_cast<uint32_t>(t));
}

// Index of t among the nine (3 * (B - 2) + log2(G / 32)), or -1.
int sq_index(DType t) {
  const auto id = static_cast<uint32_t>(t);
  const auto first = static_cast<uint32_t>(DType::SQ2_G32);
  return id >= first && id <= static_cast<uint32_t>(DType::SQ4_G128) ? static_cast<int>(id - first)
                                                                     : -1;
}

}  // namespace

bool is_sq(DType t) { return sq_index(t) >= 0; }

int sq_bits(DType t) {
  if (!is_sq(t)) throw UsageError(type_name(t) + " is not an sq format");
  return 2 + sq_index(t) / 3;
}

int64_t sq_group(DType t) {
  if (!is_sq(t)) throw UsageError(type_name(t) + " is not an sq format");
  return int64_t{32} << (sq_index(t) % 3);
}

DType sq_type(int bits, int64_t group) {
  const int log_group = group == 32 ? 0 : group == 64 ? 1 : group == 128 ? 2 : -1;
  if (bits < 2 || bits > 4 || log_group < 0) {
    throw UsageError("no sq format has " + std::to_string(bits) + "-bit codes in groups of " +
                     std::to_string(group) + " (bits 2, 3 or 4; groups of 32, 64 or 128)");
  }
  return static_cast<DType>(static_cast<uint32_t>(DType::SQ2_G32) + 3 * (bits - 2) + log_group);
}

void sq_pack_block(DType t, float d, float m, const uint8_t* codes, void* dst) {
  pack_block(sq_bits(t), sq_group(t), d, m, codes, static_cast<uint8_t*>(dst));
}

void sq_unpack_block(DType t, const void* src, uint8_t* codes, float* d, float* m) {
  unpack_block(sq_bits(t), sq_group(t), static_cast<const uint8_t*>(src), codes, d, m);
}

namespace scalar {
namespace {

template <int B, int G>
constexpr size_t kBlockBytes = kHeaderBytes + static_cast<size_t>(G * B / 8);

template <int B, int G>
void dequantize_sq(const void* src, float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  uint8_t q[G];
  for (int64_t g = 0; g < n / G; ++g, p += kBlockBytes<B, G>) {
    float d, m;
    unpack_block(B, G, p, q, &d, &m);
    for (int j = 0; j < G; ++j) dst[g * G + j] = d * static_cast<float>(q[j]) + m;
  }
}

// Round-to-nearest per group: d = (max - min) / (2^B - 1) and m = min, both rounded to half
// first; then q = clamp(round_half_even((x - m) / d), 0, 2^B - 1) against the rounded values
// (a group whose d rounds to 0 gets codes 0: every element decodes to m).
template <int B, int G>
void quantize_sq(const float* src, void* dst, int64_t n) {
  constexpr int kMaxCode = (1 << B) - 1;
  uint8_t* p = static_cast<uint8_t*>(dst);
  uint8_t q[G];
  for (int64_t g = 0; g < n / G; ++g, p += kBlockBytes<B, G>) {
    const float* x = src + g * G;
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < G; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = f16_to_f32(f32_to_f16((max - min) / kMaxCode));
    const float m = f16_to_f32(f32_to_f16(min));
    for (int j = 0; j < G; ++j) {
      q[j] = d == 0.0f ? 0
                       : static_cast<uint8_t>(std::clamp(nearest_int((x[j] - m) / d), 0, kMaxCode));
    }
    pack_block(B, G, d, m, q, p);
  }
}

// sum over sub-blocks s of d_w*d_x * sum(q_w*q_x) + m_w * s_x (s_x = d_x * sum(q_x) as stored
// in the Q8_1 block), in the order of avx2_sq.cpp: sub-block s goes to accumulator s % 2, each
// lanes.h's 8 lanes (the int products exact, one fused multiply-add per lane), and its min term
// to the float sum s % 2; the two accumulators are added lane-wise, then summed as in lanes.h,
// then the two min sums are added.
template <int B, int G>
float vec_dot_sq(int64_t n, const void* w, const void* x) {
  const uint8_t* a = static_cast<const uint8_t*>(w);
  const BlockQ8_1* b = static_cast<const BlockQ8_1*>(x);
  LaneAccumulator acc[2];
  float mins[2] = {0.0f, 0.0f};
  uint8_t q[G];
  int32_t prod[kSub];
  int64_t s = 0;
  for (int64_t g = 0; g < n / G; ++g, a += kBlockBytes<B, G>) {
    float d, m;
    unpack_block(B, G, a, q, &d, &m);
    for (int k = 0; k < G / kSub; ++k, ++s) {
      for (int j = 0; j < kSub; ++j) prod[j] = q[k * kSub + j] * b[s].qs[j];
      acc[s % 2].add_block(d * f16_to_f32(b[s].d), prod);
      mins[s % 2] += m * f16_to_f32(b[s].s);
    }
  }
  acc[0].add(acc[1]);
  return acc[0].sum() + (mins[0] + mins[1]);
}

template <int B, int G>
void set_kernels(Kernels& k) {
  k.dequantize_row = dequantize_sq<B, G>;
  k.quantize_row = quantize_sq<B, G>;
  k.vec_dot = vec_dot_sq<B, G>;
  k.quantize_row_ref = quantize_sq<B, G>;
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

}  // namespace scalar
}  // namespace squeeze::formats
