// CPU feature detection and the one start-up choice of kernel ISA.
#pragma once

#include <string_view>

namespace squeeze {

enum class Isa { Scalar, Avx2 };

// The best ISA this CPU supports, unless SQUEEZE_ISA=scalar|avx2 forces one.
// Computed once; forcing an ISA the CPU lacks is an error.
Isa active_isa();
std::string_view isa_name(Isa isa);
bool cpu_has_avx2();

}  // namespace squeeze
