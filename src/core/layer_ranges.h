// Sets of layers given on the command line as ranges: "A-B,C,..." (0-based, inclusive).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace squeeze {

// [n_layer] flags, 1 for the layers `spec` names. Errors are UsageError, naming `option`
// ("--prefill-skip") and the item at fault.
std::vector<uint8_t> parse_layer_ranges(std::string_view spec, int64_t n_layer,
                                        std::string_view option);

}  // namespace squeeze
