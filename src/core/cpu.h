// CPU feature detection and the one start-up choice of kernel ISA.
#pragma once

#include <string_view>

namespace squeeze {

// Kernel instruction sets, each a superset of the one before: Avx2 = AVX2 + FMA + F16C;
// Avx512 = Avx2 + AVX-512 F/BW/VL + VNNI (Intel Ice Lake / Sapphire Rapids and later, AMD Zen 4
// and later), used by the tiled integer matrix products; everything else runs the AVX2 code.
// Amx = Avx512 + AMX-TILE/INT8/BF16 (Intel Sapphire Rapids and later Xeons) with the tile state
// granted by the kernel: tile kernels for batches of tokens (prefill), the Avx512 code for the rest.
enum class Isa { Scalar, Avx2, Avx512, Amx };

// The best ISA this CPU supports, unless SQUEEZE_ISA=scalar|avx2|avx512|amx forces one.
// Computed once; forcing an ISA the CPU lacks is an error.
Isa active_isa();
std::string_view isa_name(Isa isa);
bool cpu_has_avx2();
bool cpu_has_avx512();  // implies cpu_has_avx2()
// AVX-512 plus VBMI2 (byte compress / expand: Ice Lake, Sapphire Rapids, Zen 4 and later), which
// the packed sparse format's AVX-512 kernel uses (formats/sparse.h).
bool cpu_has_avx512_vbmi2();
// AVX-512 plus AMX-TILE, AMX-INT8 and AMX-BF16 in CPUID, the tile state enabled in XCR0, and
// the kernel's permission to use it (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+), asked for
// once per process. False on other systems.
bool cpu_has_amx();
// Whether kernels of `isa` can run here.
bool cpu_supports(Isa isa);
// AVX2 code paths serve Avx2, Avx512 and Amx; AVX-512 ones Avx512 and Amx.
inline bool uses_avx2(Isa isa) { return isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::Amx; }
inline bool uses_avx512(Isa isa) { return isa == Isa::Avx512 || isa == Isa::Amx; }

}  // namespace squeeze
