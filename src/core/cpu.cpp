#include "core/cpu.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace squeeze {

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
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
    throw UsageError("SQUEEZE_ISA must be 'scalar' or 'avx2', got '" + f + "'");
  }
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
  }
  return "?";
}

}  // namespace squeeze
