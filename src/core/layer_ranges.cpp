#include "core/layer_ranges.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "core/error.h"

namespace squeeze {

std::vector<uint8_t> parse_layer_ranges(std::string_view spec, int64_t n_layer,
                                        std::string_view option) {
  const std::string where = std::string(option) + " '" + std::string(spec) + "'";
  auto number = [&](std::string_view s) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
      throw UsageError(where + ": '" + std::string(s) + "' is not a layer number");
    }
    return v;
  };
  std::vector<uint8_t> set(static_cast<size_t>(n_layer), 0);
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string_view item = spec.substr(start, comma - start);
    const size_t dash = item.find('-');
    const int64_t a = number(item.substr(0, dash));
    const int64_t b = dash == std::string_view::npos ? a : number(item.substr(dash + 1));
    if (a < 0 || b >= n_layer || a > b) {
      throw UsageError(where + ": '" + std::string(item) + "' is not a range of layers 0.." +
                       std::to_string(n_layer - 1));
    }
    for (int64_t il = a; il <= b; ++il) set[il] = 1;
    start = comma + 1;
  }
  return set;
}

}  // namespace squeeze
