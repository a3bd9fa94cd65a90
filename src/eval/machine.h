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

namespace squeeze::eval {

struct ProbeOptions {
  size_t buffer_bytes = size_t{512} << 20;  // read buffer: much larger than the caches
  int passes = 5;                           // read passes / FMA runs; the best one counts
  int64_t fma_iters = int64_t{1} << 21;     // loop steps per FMA work chunk
  int fma_chunks_per_thread = 16;
};

// One thread count's limits.
struct ThreadLimits {
  int threads = 0;
  double read_gb_per_s = 0;     // 1e9 bytes/s read, all threads together
  double fma_gflop_per_s = 0;   // 1e9 FLOP/s, one multiply-add = 2 FLOP, all threads together
};

struct MachineLimits {
  std::string isa;              // probe kernels used: "avx2" (256-bit loads, FMA) or "scalar"
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
