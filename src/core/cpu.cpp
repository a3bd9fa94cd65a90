#include "core/cpu.h"

#include <cpuid.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace squeeze {

// F16C is CPUID leaf 1, ECX bit 29. (clang 14's __builtin_cpu_supports has no "f16c".) Read
// once: cpu_supports runs on the kernels' dispatch path, and CPUID traps to the hypervisor in a
// VM (uncached, it took 38% of one-token decode's time and cut it to a third).
static bool cpu_has_f16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return has;
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the ZMM and mask registers.
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}

bool cpu_supports(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return cpu_has_avx2();
    case Isa::Avx512: return cpu_has_avx512();
  }
  return false;
}

static Isa detect_isa() {
  const char* forced = std::getenv("SQUEEZE_ISA");
  if (forced != nullptr && *forced != '\0') {
    const std::string f(forced);
    if (f == "scalar") return Isa::Scalar;
    if (f == "avx2") {
      if (!cpu_has_avx2()) throw UsageError("SQUEEZE_ISA=avx2 but this CPU lacks AVX2/FMA/F16C");
      return Isa::Avx2;
    }
    if (f == "avx512") {
      if (!cpu_has_avx512()) {
        throw UsageError("SQUEEZE_ISA=avx512 but this CPU lacks AVX-512 F/BW/VL/VNNI");
      }
      return Isa::Avx512;
    }
    throw UsageError("SQUEEZE_ISA must be 'scalar', 'avx2' or 'avx512', got '" + f + "'");
  }
  if (cpu_has_avx512()) return Isa::Avx512;
  return cpu_has_avx2() ? Isa::Avx2 : Isa::Scalar;
}

Isa active_isa() {
  static const Isa isa = detect_isa();
  return isa;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace squeeze
