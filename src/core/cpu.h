// CPU feature detection and the one start-up choice of kernel ISA.
#pragma once

#include <string_view>

namespace squeeze {

// Kernel instruction sets, each a superset of the one before: Avx2 = AVX2 + FMA + F16C;
// Avx512 = Avx2 + AVX-512 F/BW/VL + VNNI (Intel Ice Lake / Sapphire Rapids and later, AMD Zen 4
// and later), used by the tiled integer matrix products; everything else runs the AVX2 code.
enum class Isa { Scalar, Avx2, Avx512 };

// The best ISA this CPU supports, unless SQUEEZE_ISA=scalar|avx2|avx512 forces one.
// Computed once; forcing an ISA the CPU lacks is an error.
Isa active_isa();
std::string_view isa_name(Isa isa);
bool cpu_has_avx2();
bool cpu_has_avx512();  // implies cpu_has_avx2()
// Whether kernels of `isa` can run here.
bool cpu_supports(Isa isa);
// AVX2 code paths serve both Avx2 and Avx512.
inline bool uses_avx2(Isa isa) { return isa == Isa::Avx2 || isa == Isa::Avx512; }

}  // namespace squeeze
