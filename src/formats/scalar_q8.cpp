// Scalar reference kernels of the 8-bit formats: Q8_0 (weights and activations), and the
// activation-only Q8_1 and Q8_K. Q8_0 and Q8_1 quantize as llama.cpp does at run time on x86
// (its AVX2 quantize_row_q8_0/q8_1: scale 127/amax, round half to even), Q8_K as
// quantize_row_q8_K_ref, so activations match llama.cpp's bit for bit. Q8_0 weights are
// written by quantize_q8_0_ref, as llama-quantize writes them.
#include <cmath>
#include <cstring>

#include "formats/blocks.h"
#include "formats/kernel_list.h"
#include "formats/lanes.h"
#include "formats/rounding.h"

namespace squeeze::formats::scalar {
namespace {

// Largest |x| of a block, compared as ggml's MAX(amax, fabsf(v)) does.
float abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;
  }
  return amax;
}

}  // namespace

// Q8_0: d = amax / 127, q = round-half-even(x * 127 / amax).
void quantize_q8_0(const float* src, void* dst, int64_t n) {
  BlockQ8_0* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float* x = src + i * kBlock32;
    const float amax = abs_max(x, kBlock32);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = f32_to_f16(amax / 127.0f);
    for (int j = 0; j < kBlock32; ++j) y[i].qs[j] = static_cast<int8_t>(nearest_int(x[j] * id));
  }
}

// Q8_0 weights (ggml's quantize_row_q8_0_ref): d = amax / 127, q = roundf(x * (1 / d)), halves
// away from zero. Differs from quantize_q8_0 only where x * 127 / amax is (within an ulp of)
// a half-integer.
void quantize_q8_0_ref(const float* src, void* dst, int64_t n) {
  BlockQ8_0* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float* x = src + i * kBlock32;
    const float d = abs_max(x, kBlock32) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kBlock32; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kBlock32; ++j) dst[i * kBlock32 + j] = x[i].qs[j] * d;
  }
}

// Q8_0 x Q8_0: per block exact int products, folded in llama.cpp's AVX2 order (lanes.h).
float vec_dot_q8_0(int64_t n, const void* w, const void* x) {
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  LaneAccumulator acc;
  int32_t prod[kBlock32];
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    for (int j = 0; j < kBlock32; ++j) prod[j] = a[i].qs[j] * b[i].qs[j];
    acc.add_block(f16_to_f32(a[i].d) * f16_to_f32(b[i].d), prod);
  }
  return acc.sum();
}

// Q8_0 x Q8_0 in block order, the AMX tier's (format.h, vec_dot_repacked): each block's exact
// int sum, converted to float, fused-multiply-added with d_w * d_x (Q4_0's repacked order).
float vec_dot_q8_0_blocks(int64_t n, const void* w, const void* x) {
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(w);
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(x);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    int32_t sumi = 0;
    for (int j = 0; j < kBlock32; ++j) sumi += a[i].qs[j] * b[i].qs[j];
    acc = std::fma(static_cast<float>(sumi), f16_to_f32(a[i].d) * f16_to_f32(b[i].d), acc);
  }
  return acc;
}

// Q8_1: as Q8_0, plus s = half(d * sum(q)) with the unrounded float d.
void quantize_q8_1(const float* src, void* dst, int64_t n) {
  BlockQ8_1* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float* x = src + i * kBlock32;
    const float amax = abs_max(x, kBlock32);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = f32_to_f16(d);
    int sum = 0;
    for (int j = 0; j < kBlock32; ++j) {
      y[i].qs[j] = static_cast<int8_t>(nearest_int(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = f32_to_f16(d * static_cast<float>(sum));
  }
}

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
  const BlockQ8_1* x = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kBlock32; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kBlock32; ++j) dst[i * kBlock32 + j] = x[i].qs[j] * d;
  }
}

// Q8_K: the value of largest magnitude (the first, on ties) maps to -127 exactly;
// q = min(127, round-half-even(x * -127 / max)), d = 1 / iscale as a float.
void quantize_q8_k(const float* src, void* dst, int64_t n) {
  BlockQ8_K* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    const float* x = src + i * kSuperBlock;
    float max = 0.0f;
    float amax = 0.0f;
    for (int j = 0; j < kSuperBlock; ++j) {
      const float a = std::fabs(x[j]);
      if (a > amax) {
        amax = a;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kSuperBlock; ++j) {
      const int q = nearest_int(iscale * x[j]);
      y[i].qs[j] = static_cast<int8_t>(q < 127 ? q : 127);
    }
    for (int g = 0; g < kSuperBlock / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * g + j];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
  const BlockQ8_K* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) {
    for (int j = 0; j < kSuperBlock; ++j) dst[i * kSuperBlock + j] = x[i].qs[j] * x[i].d;
  }
}

}  // namespace squeeze::formats::scalar
