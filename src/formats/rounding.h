// Internal: the two roundings ggml's reference quantizers use (scalar code only).
#pragma once

#include <cstdint>
#include <cstring>

namespace squeeze::formats {

// Round half to even, as ggml's nearest_int: adding 1.5 * 2^23 leaves the integer in the low
// mantissa bits. Exact for |v| <= 2^22 - 1; larger inputs are clamped first (they only occur
// for degenerate scales and end up clamped by every caller anyway).
inline int nearest_int(float v) {
  constexpr float kLimit = 4194303.0f;
  if (v > kLimit) v = kLimit;
  if (v < -kLimit) v = -kLimit;
  const float biased = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &biased, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

}  // namespace squeeze::formats
