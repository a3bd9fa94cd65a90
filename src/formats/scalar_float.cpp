// Scalar reference kernels of the float formats F32, F16, BF16.
// Dot products accumulate in double, as ggml's scalar ggml_vec_dot_f32/f16/bf16 do.
#include <cstring>

#include "core/fp16.h"
#include "formats/kernel_list.h"

namespace squeeze::formats::scalar {

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

float vec_dot_f32(int64_t n, const void* w, const void* x) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i] * b[i]);
  return static_cast<float>(sum);
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const f16_t* h = static_cast<const f16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
}

void quantize_f16(const float* src, void* dst, int64_t n) {
  f16_t* h = static_cast<f16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
}

float vec_dot_f16(int64_t n, const void* w, const void* x) {
  const f16_t* a = static_cast<const f16_t*>(w);
  const f16_t* b = static_cast<const f16_t*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(f16_to_f32(a[i]) * f16_to_f32(b[i]));
  return static_cast<float>(sum);
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const bf16_t* h = static_cast<const bf16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}

void quantize_bf16(const float* src, void* dst, int64_t n) {
  bf16_t* h = static_cast<bf16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}

float vec_dot_bf16(int64_t n, const void* w, const void* x) {
  const bf16_t* a = static_cast<const bf16_t*>(w);
  const bf16_t* b = static_cast<const bf16_t*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(bf16_to_f32(a[i]) * bf16_to_f32(b[i]));
  }
  return static_cast<float>(sum);
}

}  // namespace squeeze::formats::scalar
