#include "core/cpu.h"

#include <cpuid.h>

#include <cstdlib>
#include <string>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

bool cpu_has_avx512_vbmi2() {
  __builtin_cpu_init();
  return cpu_has_avx512() && __builtin_cpu_supports("avx512vbmi2");
}

// CPUID leaf 7 EDX: AMX-BF16 bit 22, AMX-TILE bit 24, AMX-INT8 bit 25. XCR0 bits 17
// (XTILECFG) and 18 (XTILEDATA): the OS saves the tile state. Linux then hands the 8 KiB of tile
// data out per process on request (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); a
// thread that runs a tile instruction without it is killed with SIGILL.
static bool amx_usable() {
#if defined(__linux__) && defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  constexpr unsigned kAmx = (1u << 22) | (1u << 24) | (1u << 25);
  if ((edx & kAmx) != kAmx) return false;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);
  if ((xcr0_lo & kTileState) != kTileState) return false;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

bool cpu_has_amx() {
  static const bool has = cpu_has_avx512() && amx_usable();
  return has;
}

bool cpu_supports(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return cpu_has_avx2();
    case Isa::Avx512: return cpu_has_avx512();
    case Isa::Amx: return cpu_has_amx();
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
    if (f == "amx") {
      if (!cpu_has_amx()) {
        throw UsageError(
            "SQUEEZE_ISA=amx but this CPU (or its kernel) offers no AMX-TILE/INT8/BF16 tiles");
      }
      return Isa::Amx;
    }
    throw UsageError("SQUEEZE_ISA must be 'scalar', 'avx2', 'avx512' or 'amx', got '" + f + "'");
  }
  if (cpu_has_amx()) return Isa::Amx;
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
    case Isa::Amx: return "amx";
  }
  return "?";
}

}  // namespace squeeze
