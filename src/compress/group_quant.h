// Group-wise integer quantization of weight rows, the building block of round-to-nearest with
// chosen scales and of GPTQ: each row of a matrix is cut into groups of consecutive elements,
// each group gets one (scale d, offset m) pair and every element an integer code c, and the
// stored value is d * c + m. The grid (range of c, symmetric or not) comes from the storage
// type: llama.cpp's Q4_0 / Q4_1 / Q8_0 where the scheme fits one exactly, squeeze's sq*_g*
// types otherwise (formats/sq.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/thread_pool.h"
#include "formats/format.h"

namespace squeeze::compress {

// How a group's (d, m) is picked from its weights:
//   absmax     the group's extremes map to the grid's ends;
//   percentile the extremes are first clipped at a percentile of |w| over the whole tensor;
//   mse        the extremes are shrunk by the factor (1.00, 0.99, ... 0.20) that minimises the
//              group's squared rounding error;
//   kl         the extremes are first clipped at the threshold whose quantized histogram of
//              |w| over the tensor is closest in KL divergence to the original (TensorRT's
//              entropy calibration, applied to weights).
enum class ScaleMethod { Absmax, Percentile, Mse, Kl };
ScaleMethod parse_scale_method(std::string_view name);  // throws UsageError
std::string_view scale_method_name(ScaleMethod m);

struct QuantScheme {
  int bits = 4;              // 2, 3, 4 or 8
  int64_t group = 32;        // 32, 64, 128, or -1 for one group per row
  bool sym = false;          // symmetric grid (no free offset)
  ScaleMethod scale = ScaleMethod::Absmax;
  float percentile = 99.9f;  // for ScaleMethod::Percentile, in (0, 100]
};

// Throws UsageError for a scheme squeeze cannot store (e.g. 8-bit asymmetric).
void check_scheme(const QuantScheme& s);
// "gptq-style" short text: "4-bit g128 asym mse".
std::string scheme_text(const QuantScheme& s);

// Where a scheme's result goes for rows of n_cols elements.
struct Storage {
  formats::DType type = formats::DType::Q4_1;
  int64_t group = 32;  // elements per (d, m) pair in the file
  bool per_row = false;  // one pair per row, repeated in every group (scheme group -1)
  // The scheme's group does not divide the row and a smaller one is used (e.g. 128 -> 64 for
  // rows of 576), as llama.cpp falls back to another type for unusual shapes.
  bool fallback = false;
};
// Throws UsageError when n_cols is not a multiple of 32.
Storage storage_for(const QuantScheme& s, int64_t n_cols);

// The integer grid of a storage type: codes in [cmin, cmax]; a symmetric grid has
// m = -zero * d (for Q8_0: d = amax / 127, codes 1..255 around 128).
struct Grid {
  int cmin = 0;
  int cmax = 15;
  bool sym = false;
  int zero = 0;
  bool q8 = false;
};
Grid grid_for(const QuantScheme& s, formats::DType store);

// d and m are fp16-representable (what the file stores).
struct GroupParams {
  float d = 0.0f;
  float m = 0.0f;
};

// Params for the values w[0..n) of one group. clip: a threshold on |w| from tensor_clip
// (infinity: none). The MSE search uses the error of the stored (fp16) params.
GroupParams choose_params(const float* w, int64_t n, const Grid& g, ScaleMethod method,
                          float clip);

inline int quantize_code(float x, const GroupParams& p, const Grid& g) {
  if (p.d == 0.0f) return g.sym ? g.zero : g.cmin;
  const float c = std::nearbyint((x - p.m) / p.d);
  return static_cast<int>(c < static_cast<float>(g.cmin)   ? static_cast<float>(g.cmin)
                          : c > static_cast<float>(g.cmax) ? static_cast<float>(g.cmax)
                                                           : c);
}
// The value the file's dequantizer produces for code c (ggml's (c - 8) * d for Q4_0 is the
// same float: every product and sum here is exact for codes of at most 8 bits).
inline float dequant_code(int c, const GroupParams& p) {
  return p.d * static_cast<float>(c) + p.m;
}

// The per-tensor clip threshold of ScaleMethod::Percentile and Kl over w[0..n) (infinity for
// the other methods).
float tensor_clip(const float* w, int64_t n, const QuantScheme& s);

// Packs one row: codes[n_cols] and params[n_cols / group] into `store`'s blocks at dst.
void encode_row(formats::DType store, int64_t group, const uint8_t* codes,
                const GroupParams* params, int64_t n_cols, void* dst);

// Round-to-nearest of a [rows, cols] float matrix (row-major) into dst (rows *
// row_bytes(st.type, cols) bytes). With ScaleMethod::Absmax and a llama.cpp storage type of
// group 32 this is ggml's reference quantizer, bit for bit (llama-quantize's result).
void quantize_rtn(const float* w, int64_t rows, int64_t cols, const QuantScheme& s,
                  const Storage& st, void* dst, ThreadPool& pool);

}  // namespace squeeze::compress
