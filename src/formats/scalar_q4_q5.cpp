// Scalar reference kernels of Q4_0, Q4_1, Q5_0, Q5_1 (blocks of 32).
// Quantizers follow ggml's reference rounding (quantize_row_q4_0_ref etc.), so files written
// with them match llama.cpp's own "pure" quantization. Dot products follow ggml's integer math:
// one exact int32 sum per block, scaled once.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "formats/blocks.h"
#include "formats/kernel_list.h"
#include "formats/lanes.h"

namespace squeeze::formats::scalar {
namespace {

constexpr int kHalf = kBlock32 / 2;

// The value of largest magnitude in a block, with its sign (the first one on ties).
float signed_abs_max(const float* x) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < kBlock32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < kBlock32; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

uint32_t load_qh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, sizeof v);
  return v;
}

// Packs 32 5-bit codes: low nibbles into qs (j and j+16 share a byte), bit 4 into qh bit j.
void pack5(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + kHalf] & 0x0F) << 4));
    h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    h |= static_cast<uint32_t>((q[j + kHalf] >> 4) & 1) << (j + kHalf);
  }
  std::memcpy(qh, &h, sizeof h);
}

// The 5-bit code of element j (0..31) of a Q5 block.
int code5(const uint8_t* qs, uint32_t qh, int j) {
  const int low = j < kHalf ? (qs[j] & 0x0F) : (qs[j - kHalf] >> 4);
  return low | static_cast<int>(((qh >> j) & 1) << 4);
}

}  // namespace

// Q4_0: d = max / -8 (max: the signed value of largest magnitude, which maps to code 0);
// q = min(15, trunc(x / d + 8.5)).
void quantize_q4_0(const float* src, void* dst, int64_t n) {
  BlockQ4_0* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float* x = src + i * kBlock32;
    const float d = signed_abs_max(x) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + kHalf] * id + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float d = f16_to_f32(x[i].d);
    float* y = dst + i * kBlock32;
    for (int j = 0; j < kHalf; ++j) {
      y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kHalf] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

// Q4_0 x Q8_0 in llama.cpp's AVX2 order (lanes.h). Unpacked element order: the low nibbles
// of the 16 bytes are elements 0..15, the high nibbles 16..31.
float vec_dot_q4_0(int64_t n, const void* w, const void* x) {
  const BlockQ4_0* a = static_cast<const BlockQ4_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  LaneAccumulator acc;
  int32_t prod[kBlock32];
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    for (int j = 0; j < kHalf; ++j) {
      prod[j] = ((a[i].qs[j] & 0x0F) - 8) * b[i].qs[j];
      prod[j + kHalf] = ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + kHalf];
    }
    acc.add_block(f16_to_f32(a[i].d) * f16_to_f32(b[i].d), prod);
  }
  return acc.sum();
}

// Q4_0 x Q8_0 in the order of llama.cpp's repacked x86 kernels (gemv/gemm_q4_0_8x8_q8_0):
// each block's exact int sum, converted to float, fused-multiply-added with d_w * d_x.
float vec_dot_q4_0_repacked(int64_t n, const void* w, const void* x) {
  const BlockQ4_0* a = static_cast<const BlockQ4_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kHalf; ++j) {
      sumi += ((a[i].qs[j] & 0x0F) - 8) * b[i].qs[j];
      sumi += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + kHalf];
    }
    acc = std::fma(static_cast<float>(sumi), f16_to_f32(a[i].d) * f16_to_f32(b[i].d), acc);
  }
  return acc;
}

// Q4_1: d = (max - min) / 15, m = min; q = min(15, trunc((x - min) / d + 0.5)).
void quantize_q4_1(const float* src, void* dst, int64_t n) {
  BlockQ4_1* y = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float* x = src + i * kBlock32;
    float min, max;
    min_max(x, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(min);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int q1 =
          std::min(15, static_cast<int>(static_cast<int8_t>((x[j + kHalf] - min) * id + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  const BlockQ4_1* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    float* y = dst + i * kBlock32;
    for (int j = 0; j < kHalf; ++j) {
      y[j] = (x[i].qs[j] & 0x0F) * d + m;
      y[j + kHalf] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}

// Q4_1 x Q8_1: d_w*d_x * sum(q_w*q_x) + m_w * s_x, where s_x = d_x * sum(q_x).
// Q4_1 x Q8_1: sum_blocks d_w*d_x * sum(q_w*q_x) + m_w*s_x, in llama.cpp's AVX2 order: the
// first term in lanes (lanes.h), the second summed block by block, the two added at the end.
float vec_dot_q4_1(int64_t n, const void* w, const void* x) {
  const BlockQ4_1* a = static_cast<const BlockQ4_1*>(w);
  const BlockQ8_1* b = static_cast<const BlockQ8_1*>(x);
  LaneAccumulator acc;
  float mins = 0.0f;
  int32_t prod[kBlock32];
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    mins += f16_to_f32(a[i].m) * f16_to_f32(b[i].s);
    for (int j = 0; j < kHalf; ++j) {
      prod[j] = (a[i].qs[j] & 0x0F) * b[i].qs[j];
      prod[j + kHalf] = (a[i].qs[j] >> 4) * b[i].qs[j + kHalf];
    }
    acc.add_block(f16_to_f32(a[i].d) * f16_to_f32(b[i].d), prod);
  }
  return acc.sum() + mins;
}

// Q5_0: d = max / -16; q = min(31, trunc(x / d + 16.5)).
void quantize_q5_0(const float* src, void* dst, int64_t n) {
  BlockQ5_0* y = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float* x = src + i * kBlock32;
    const float d = signed_abs_max(x) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    uint8_t q[kBlock32];
    for (int j = 0; j < kBlock32; ++j) {
      q[j] = static_cast<uint8_t>(
          std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
    }
    pack5(q, y[i].qs, y[i].qh);
  }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const BlockQ5_0* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < kBlock32; ++j) dst[i * kBlock32 + j] = (code5(x[i].qs, qh, j) - 16) * d;
  }
}

float vec_dot_q5_0(int64_t n, const void* w, const void* x) {
  const BlockQ5_0* a = static_cast<const BlockQ5_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const uint32_t qh = load_qh(a[i].qh);
    int32_t sumi = 0;
    for (int j = 0; j < kBlock32; ++j) sumi += (code5(a[i].qs, qh, j) - 16) * b[i].qs[j];
    sum += (f16_to_f32(a[i].d) * f16_to_f32(b[i].d)) * static_cast<float>(sumi);
  }
  return sum;
}

// Q5_1: d = (max - min) / 31, m = min; q = min(31, trunc((x - min) / d + 0.5)).
// (ggml's reference has no clamp here; (x - min) / d + 0.5 < 32 always, so none is needed.)
void quantize_q5_1(const float* src, void* dst, int64_t n) {
  BlockQ5_1* y = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float* x = src + i * kBlock32;
    float min, max;
    min_max(x, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(min);
    uint8_t q[kBlock32];
    for (int j = 0; j < kBlock32; ++j) {
      q[j] = static_cast<uint8_t>(
          std::min(31, static_cast<int>(static_cast<uint8_t>((x[j] - min) * id + 0.5f))));
    }
    pack5(q, y[i].qs, y[i].qh);
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  const BlockQ5_1* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < kBlock32; ++j) dst[i * kBlock32 + j] = code5(x[i].qs, qh, j) * d + m;
  }
}

float vec_dot_q5_1(int64_t n, const void* w, const void* x) {
  const BlockQ5_1* a = static_cast<const BlockQ5_1*>(w);
  const BlockQ8_1* b = static_cast<const BlockQ8_1*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const uint32_t qh = load_qh(a[i].qh);
    int32_t sumi = 0;
    for (int j = 0; j < kBlock32; ++j) sumi += code5(a[i].qs, qh, j) * b[i].qs[j];
    sum += (f16_to_f32(a[i].d) * f16_to_f32(b[i].d)) * static_cast<float>(sumi) +
           f16_to_f32(a[i].m) * f16_to_f32(b[i].s);
  }
  return sum;
}

}  // namespace squeeze::formats::scalar
