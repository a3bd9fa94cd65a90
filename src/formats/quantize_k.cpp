// Reference quantizers of Q4_K and Q6_K.
//
// These are ggml's reference scale searches (quantize_row_q4_K_ref / q6_K_ref, without an
// importance matrix), re-implemented step by step:
//   Q4_K: per sub-block of 32, an affine fit x ~ scale*q - min found by trying 21 candidate
//         scales around (max - min)/15 and solving weighted least squares for each
//         (weights |x| + rms(x)); then the 8 scales and 8 mins are quantized to 6 bits against
//         a half d / dmin, and every element is re-rounded against the final scales.
//   Q6_K: per sub-block of 16, a symmetric fit x ~ scale*q found by trying 19 candidate
//         scales around max/-32, weighted by x^2; the 16 scales are quantized to int8 against
//         a half d, and every element is re-rounded against the final scales.
// Same steps and float operations as ggml's, but not checked byte for byte against it (the
// outside reference the tests use, gguf-py, has no K quantizers); tests/formats bounds their
// error tightly enough that dropping the scale search fails.
#include <cmath>
#include <cstring>

#include "formats/blocks.h"
#include "formats/kernel_list.h"
#include "formats/rounding.h"

namespace squeeze::formats::scalar {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

int clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Affine fit of n values to codes L in [0, nmax]: x ~ scale * L - the_min (the_min >= 0).
// Returns scale; tries scales (nmax + rmin + rdelta*k) / (max - min) for k = 0..nstep.
float fit_affine(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                 uint8_t* laux, float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * step + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * laux[i] + this_min - x[i];
        error += weights[i] * (diff * diff);
      }
      if (error < best_error) {
        std::memcpy(L, laux, static_cast<size_t>(n));
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Symmetric fit of n values to codes L in [0, 2*nmax) (L - nmax is the signed code), weighted
// by x^2. Returns the scale (negative when the largest-magnitude value is positive).
float fit_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  float iscale = -nmax / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(nmax + 0.1f * step) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void quantize_block_q4_k(const float* x, BlockQ4_K* y) {
  uint8_t L[kSuperBlock];
  uint8_t laux[32];
  float weights[32];
  float scales[8];
  float mins[8];
  float max_scale = 0;
  float max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xj[l]);
    scales[j] = fit_affine(32, 15, xj, weights, L + 32 * j, &mins[j], laux, -1.0f, 0.1f, 20);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }

  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(y->scales, 0, sizeof y->scales);
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = static_cast<uint8_t>(clamp(nearest_int(inv_scale * scales[j]), 0, 63));
    const uint8_t lm = static_cast<uint8_t>(clamp(nearest_int(inv_min * mins[j]), 0, 63));
    if (j < 4) {
      y->scales[j] = ls;
      y->scales[j + 4] = lm;
    } else {
      y->scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      y->scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      y->scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  y->d = f32_to_f16(max_scale / 63.0f);
  y->dmin = f32_to_f16(max_min / 63.0f);

  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(j, y->scales, &sc, &m);
    const float d = f16_to_f32(y->d) * sc;
    if (d == 0.0f) continue;
    const float dm = f16_to_f32(y->dmin) * m;
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] = static_cast<uint8_t>(clamp(nearest_int((x[32 * j + l] + dm) / d), 0, 15));
    }
  }
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      y->qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
  }
}

void quantize_block_q6_k(const float* x, BlockQ6_K* y) {
  int8_t L[kSuperBlock];
  float scales[16];
  float max_scale = 0;
  float max_abs_scale = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(y, 0, sizeof *y);
    return;
  }
  const float iscale = -128.0f / max_scale;
  y->d = f32_to_f16(1 / iscale);
  for (int j = 0; j < 16; ++j) {
    const int s = nearest_int(iscale * scales[j]);
    y->scales[j] = static_cast<int8_t>(clamp(s, -128, 127));
  }
  for (int j = 0; j < 16; ++j) {
    const float d = f16_to_f32(y->d) * y->scales[j];
    if (d == 0.0f) continue;
    for (int l = 0; l < 16; ++l) {
      L[16 * j + l] = static_cast<int8_t>(clamp(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
    }
  }
  for (int h = 0; h < 2; ++h) {
    const int8_t* q = L + 128 * h;
    uint8_t* ql = y->ql + 64 * h;
    uint8_t* qh = y->qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((q[l] & 0xF) | ((q[l + 64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((q[l + 32] & 0xF) | ((q[l + 96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((q[l] >> 4) | ((q[l + 32] >> 4) << 2) | ((q[l + 64] >> 4) << 4) |
                                   ((q[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace

void quantize_q4_k(const float* src, void* dst, int64_t n) {
  BlockQ4_K* y = static_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) quantize_block_q4_k(src + i * kSuperBlock, &y[i]);
}

void quantize_q6_k(const float* src, void* dst, int64_t n) {
  BlockQ6_K* y = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kSuperBlock; ++i) quantize_block_q6_k(src + i * kSuperBlock, &y[i]);
}

}  // namespace squeeze::formats::scalar
