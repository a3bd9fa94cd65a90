// What this machine can do at most: streaming read bandwidth and peak FP32 multiply-add
// throughput, measured per thread count. Bench reports achieved GB/s and GFLOP/s as fractions
// of these ("roofs"). `squeeze bench --machine` measures them and caches them in a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/thread_pool.h"
#include "formats/format.h"

namespace squeeze::eval {

struct ProbeOptions {
  size_t buffer_bytes = size_t{512} << 20;  // read buffer: much larger than the caches
  int passes = 5;                           // read passes / FMA runs; the best one counts
  int64_t fma_iters = int64_t{1} << 21;     // loop steps per FMA work chunk
  int fma_chunks_per_thread = 16;
};

// One thread count's limits, all threads together; 1e9 operations per second, a multiply-add
// counting 2. The compute roofs of the wider tiers are 0 where the probe's ISA lacks them.
struct ThreadLimits {
  int threads = 0;
  double read_gb_per_s = 0;        // 1e9 bytes/s read
  double fma_gflop_per_s = 0;      // FP32 multiply-adds, 256-bit (the avx2 probe) or scalar
  double fma512_gflop_per_s = 0;   // FP32 multiply-adds on 512-bit registers (avx512, amx)
  double vnni_gop_per_s = 0;       // int8 products, vpdpbusd on 512-bit registers (avx512, amx)
  double amx_int8_gop_per_s = 0;   // int8 tile products, tdpbssd (amx)
  double amx_bf16_gflop_per_s = 0; // bf16 tile products, tdpbf16ps (amx)
};

// The compute roof a prefill of weights in `type` runs against on `isa`: the rate of the
// instructions its batched products are built from (Q4_0, Q8_0 on amx: int8 tiles; F16 on amx: bf16
// tiles; the integer formats on avx512 / amx: vpdpbusd; F16 on avx512: 512-bit FMA; else the
// FP32 FMA roof). Name and 1e9 ops/s; 0 when the limits do not hold that roof.
struct PrefillRoof {
  std::string name;
  double gop_per_s = 0;
};
PrefillRoof prefill_roof(const ThreadLimits& t, formats::DType type, Isa isa);

struct MachineLimits {
  std::string isa;              // probe kernels used: "scalar", "avx2" (256-bit loads, FMA),
                                // "avx512" (+ 512-bit FMA, VNNI), "amx" (+ int8 / bf16 tiles)
  size_t buffer_bytes = 0;
  std::string date;             // YYYY-MM-DD of the measurement
  std::vector<ThreadLimits> by_threads;
  const ThreadLimits* find(int threads) const;
};

// Streams once through words[0, n_words) per pass with all threads of the pool (dynamically
// claimed 1 MiB slices) and returns the best pass in GB/s.
double measure_read_gb_per_s(ThreadPool& pool, Isa isa, const uint64_t* words, size_t n_words,
                             int passes);
// Runs fma_chunks_per_thread * pool.size() chunks of independent multiply-adds and returns the
// best of `passes` runs in GFLOP/s.
double measure_fma_gflop_per_s(ThreadPool& pool, Isa isa, const ProbeOptions& opt);
// The compute roofs of the AVX-512 and AMX tiers into t (those `isa` has), the same way.
void measure_wide_roofs(ThreadPool& pool, Isa isa, const ProbeOptions& opt, ThreadLimits& t);

// Measures 1 thread and, when larger, `threads` threads. isa Avx2 requires cpu_has_avx2().
MachineLimits measure_machine(int threads, Isa isa, const ProbeOptions& opt = {});

// $XDG_CACHE_HOME/squeeze/machine.json, else $HOME/.cache/squeeze/machine.json.
std::string default_machine_file();
// Reads the cache (nullopt when the file is absent; throws FormatError when it is unreadable).
std::optional<std::vector<MachineLimits>> read_machine_file(const std::string& path);
// Merges `m` into the file (replacing entries of the same isa and thread count); creates it.
void write_machine_file(const std::string& path, const MachineLimits& m);
// The cached limits of `isa` at `threads`, if present.
std::optional<ThreadLimits> cached_limits(const std::string& path, Isa isa, int threads);

std::string machine_to_json(const MachineLimits& m);
std::string machine_to_text(const MachineLimits& m);

}  // namespace squeeze::eval
