// Quantized KV-cache storage (KIVI, KVQuant): asymmetric codes of 8, 4 or 2 bits (uniform, or a
// calibrated codebook's non-uniform levels: kv/codebook.h), keys
// per channel (each channel of a block of tokens shares a scale and a minimum: the outliers of
// keys live in channels) or per token, values per token in groups of channels; the options that
// choose them, the exact tokens (attention sinks, a recent window) a cache keeps in half, and the
// outliers it keeps aside in half (KVQuant's dense-and-sparse quantization).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/fp16.h"

namespace squeeze::kv {

enum class KvType { F16, Q8, Q4, Q2 };
enum class KeyAxis { Channel, Token };

struct KvOptions {
  KvType type = KvType::F16;
  KeyAxis k_axis = KeyAxis::Channel;
  // Values (and keys per token) share a scale and minimum per `group` columns; keys per
  // channel per `group` tokens (a block of the cache).
  int64_t group = 64;
  int64_t recent = 128;  // the newest tokens kept in half (KIVI's R), whole blocks
  int64_t sinks = 0;     // the first tokens kept in half (StreamingLLM's sinks), whole blocks
  // The fraction of a frozen block's keys (and of its values) kept aside as outliers (KVQuant's
  // dense-and-sparse: 0.01), the quantizer fitting only the rest.
  double outliers = 0;
  // Keys quantized before RoPE (KVQuant: a channel keeps its scale across positions there); the
  // cache undoes the rotation when it freezes a block and redoes it when it reads one.
  bool k_prerope = false;
  // Codes index the model's calibrated levels (squeeze calibrate-kv, kv/codebook.h) instead of
  // a uniform grid; q4 and q2 only.
  bool codebook = false;
  bool quantized() const { return type != KvType::F16; }
};

// "f16", "q8", "q4", "q2" and back; UsageError for another name.
KvType parse_kv_type(std::string_view name);
std::string kv_type_name(KvType t);
KeyAxis parse_key_axis(std::string_view name);  // "channel", "token"
int kv_bits(KvType t);                          // 16, 8, 4, 2
// "q4 (keys per channel, values per token, group 64, recent 128, sinks 0)", or "f16"; with
// outliers ", outliers 0.01" before the parenthesis closes, keys before RoPE "channel before
// RoPE", a codebook ", codebook".
std::string describe(const KvOptions& o);
// UsageError unless the group divides the row (n_head_kv * head_dim), recent and sinks are
// not negative, outliers is in [0, 0.5] and a codebook goes with q4 or q2.
void check_kv_options(const KvOptions& o, int64_t row);
// Tokens per block of a cache with these options: the key group with keys per channel, else
// 16 (vLLM's block).
int64_t block_tokens(const KvOptions& o);

// One group's scale and minimum: x ~= min + code * scale, code in [0, 2^bits); with a codebook's
// levels (2^bits ascending values in [0, 2^bits - 1]), x ~= min + levels[code] * scale.
struct QuantParams {
  f16_t scale = 0;
  f16_t min = 0;
};

// The parameters of a group whose values span [lo, hi]: the minimum rounded to half, the scale
// from it so the top code reaches hi (0 for a constant group).
QuantParams fit_group(float lo, float hi, int bits);

// Bytes of n codes of `bits` bits packed low bits first (8 / bits codes a byte).
inline size_t packed_bytes(int64_t n, int bits) { return static_cast<size_t>((n * bits + 7) / 8); }

// A row x[width] quantized in groups of `group` columns: codes into codes
// (packed_bytes(width, bits)), the groups' parameters into params[width / group]. With
// `levels` (a codebook's, see QuantParams), each value takes the code of its nearest level.
void quantize_row_groups(const float* x, int64_t width, int64_t group, int bits, uint8_t* codes,
                         QuantParams* params, const float* levels = nullptr);
// Rows x[n_rows, width] quantized per column: column c of every row shares params[c]; the
// codes column by column (column c's n_rows codes at codes + c * packed_bytes(n_rows, bits)),
// so attention sums a column's products over all rows in one pass.
void quantize_columns(const float* x, int64_t n_rows, int64_t width, int bits, uint8_t* codes,
                      QuantParams* params, const float* levels = nullptr);
// A row back: column c is params[c / group].min + code * params[c / group].scale, rounded to
// half as the cache's rows are (levels[code] for code with a codebook).
void dequantize_row(const uint8_t* codes, const QuantParams* params, int64_t width, int64_t group,
                    int bits, f16_t* out, const float* levels = nullptr);
// Row r of quantize_columns' output back, in half.
void dequantize_column_row(const uint8_t* codes, const QuantParams* params, int64_t n_rows,
                           int64_t width, int bits, int64_t r, f16_t* out,
                           const float* levels = nullptr);
// Dense-and-sparse quantization (KVQuant): an entry of a frozen block kept aside, at row t and
// column c, as the difference between its value and what its code holds (so attention adds
// q . delta to the codes' sum, and a read adds it to the dequantized value).
struct Outlier {
  uint16_t t = 0, c = 0;
  f16_t delta = 0;
};
static_assert(sizeof(Outlier) == 6);

// The run of outliers (sorted by column, as take_outliers writes them) in columns [c0, c0 + n).
inline std::span<const Outlier> outliers_in_columns(const Outlier* all, int64_t n_all, int64_t c0, int64_t n) {
  const Outlier* first = std::lower_bound(all, all + n_all, c0, [](const Outlier& o, int64_t c) { return o.c < c; });
  const Outlier* last = std::lower_bound(first, all + n_all, c0 + n, [](const Outlier& o, int64_t c) { return o.c < c; });
  return {first, last};
}

// Outliers per K (and per V) of a frozen block of `block` tokens of `row` values.
int64_t outlier_count(const KvOptions& o, int64_t block, int64_t row);

// Takes up to n outliers of x[n_rows, width] for a quantizer of groups (each column over all
// rows when by_column, else `group` columns of a row): greedily the end of a group (its
// smallest or largest entry) whose removal shrinks the group's squared range the most, each
// group keeping at least two entries. Clamps the taken entries in x into the range their group
// keeps (so the quantizer fits only the rest) and writes them to out[0, taken) sorted by (c, t)
// with their values before clamping in original[0, taken). Returns taken (n unless every group is
// down to two entries).
int64_t take_outliers(float* x, int64_t n_rows, int64_t width, int64_t group, bool by_column,
                      int64_t n, Outlier* out, float* original);

// Code i of packed codes.
inline uint32_t code_at(const uint8_t* codes, int64_t i, int bits) {
  const int64_t bit = i * bits;
  return (codes[bit / 8] >> (bit % 8)) & ((1u << bits) - 1);
}

// The code of the level nearest t (levels ascending, top + 1 of them): past each midpoint the
// code goes up, ties to the lower.
template <class T>
inline uint32_t nearest_level(const float* levels, uint32_t top, T t) {
  uint32_t c = 0;
  while (c < top && t > T(0.5) * (levels[c] + levels[c + 1])) ++c;
  return c;
}

// What code i stands for in code units: the code, or its level with a codebook.
inline float code_value(const uint8_t* codes, int64_t i, int bits, const float* levels) {
  const uint32_t c = code_at(codes, i, bits);
  return levels != nullptr ? levels[c] : static_cast<float>(c);
}

}  // namespace squeeze::kv
