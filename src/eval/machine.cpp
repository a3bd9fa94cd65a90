#include "eval/machine.h"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/timer.h"
#include "eval/machine_kernels.h"
#include "formats/sq.h"

namespace squeeze::eval {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace detail {

uint64_t stream_read_scalar(const uint64_t* words, size_t n) {
  uint64_t a[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < n; i += kReadBlockWords) {
    for (size_t j = 0; j < kReadBlockWords; ++j) a[j % 4] += words[i + j];
  }
  return a[0] + a[1] + a[2] + a[3];
}

float fma_loop_scalar(int64_t iters, float x) {
  float acc[kFmaPerIterScalar];
  for (int64_t j = 0; j < kFmaPerIterScalar; ++j) acc[j] = x + 0.001f * static_cast<float>(j);
  for (int64_t i = 0; i < iters; ++i) {
    for (int64_t j = 0; j < kFmaPerIterScalar; ++j) acc[j] = acc[j] * 0.999999f + 1e-7f;
  }
  float s = 0;
  for (int64_t j = 0; j < kFmaPerIterScalar; ++j) s += acc[j];
  return s;
}

}  // namespace detail

namespace {

// Per-thread results, one cache line each, so the loops cannot be optimised away.
struct alignas(64) Sink {
  uint64_t u = 0;
  float f = 0;
};

bool use_avx2(Isa isa) {
  if (!uses_avx2(isa)) return false;  // the AVX-512 tier probes with the AVX2 code
  if (!SQUEEZE_HAVE_AVX2_PROBE || !cpu_has_avx2()) {
    throw UsageError("the AVX2 machine probe needs an x86-64 CPU with AVX2 and FMA");
  }
  return true;
}

uint64_t stream_read(bool avx2, const uint64_t* words, size_t n) {
#if SQUEEZE_HAVE_AVX2_PROBE
  if (avx2) return detail::stream_read_avx2(words, n);
#endif
  (void)avx2;
  return detail::stream_read_scalar(words, n);
}

float fma_loop(bool avx2, int64_t iters, float x) {
#if SQUEEZE_HAVE_AVX2_PROBE
  if (avx2) return detail::fma_loop_avx2(iters, x);
#endif
  (void)avx2;
  return detail::fma_loop_scalar(iters, x);
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

}  // namespace

const ThreadLimits* MachineLimits::find(int threads) const {
  for (const ThreadLimits& t : by_threads) {
    if (t.threads == threads) return &t;
  }
  return nullptr;
}

double measure_read_gb_per_s(ThreadPool& pool, Isa isa, const uint64_t* words, size_t n_words,
                             int passes) {
  const bool avx2 = use_avx2(isa);
  constexpr size_t kSliceWords = (size_t{1} << 20) / sizeof(uint64_t);  // 1 MiB slices
  n_words -= n_words % detail::kReadBlockWords;
  if (n_words == 0) throw UsageError("the read probe needs a non-empty buffer");
  const int64_t n_slices = static_cast<int64_t>((n_words + kSliceWords - 1) / kSliceWords);
  std::vector<Sink> sink(static_cast<size_t>(pool.size()));
  double best = 0;
  for (int p = 0; p < std::max(1, passes); ++p) {
    const Timer timer;
    pool.run_chunks(n_slices, [&](int64_t c, int ith) {
      const size_t begin = static_cast<size_t>(c) * kSliceWords;
      const size_t len = std::min(kSliceWords, n_words - begin);
      sink[ith].u += stream_read(avx2, words + begin, len);
    });
    const double s = timer.seconds();
    if (s > 0) best = std::max(best, static_cast<double>(n_words * sizeof(uint64_t)) / s / 1e9);
  }
  uint64_t all = 0;
  for (const Sink& s : sink) all += s.u;
  volatile uint64_t observed = all;  // the checksum is used, so the loads stay
  (void)observed;
  return best;
}

namespace {

// Runs fma_chunks_per_thread * pool.size() chunks of loop(iters, chunk), each iters steps of
// ops_per_iter operations, and returns the best of `passes` runs in 1e9 ops/s. loop returns a
// value that depends on all its work (summed, so the loops stay).
template <typename Loop>
double measure_rate(ThreadPool& pool, const ProbeOptions& opt, int64_t iters, int64_t ops_per_iter,
                    Loop loop) {
  const int64_t n_chunks = int64_t{std::max(1, opt.fma_chunks_per_thread)} * pool.size();
  iters = std::max<int64_t>(1, iters);
  const double ops = static_cast<double>(ops_per_iter) * static_cast<double>(iters * n_chunks);
  std::vector<Sink> sink(static_cast<size_t>(pool.size()));
  double best = 0;
  for (int p = 0; p < std::max(1, opt.passes); ++p) {
    const Timer timer;
    pool.run_chunks(n_chunks, [&](int64_t c, int ith) { sink[ith].f += loop(iters, c); });
    const double s = timer.seconds();
    if (s > 0) best = std::max(best, ops / s / 1e9);
  }
  float all = 0;
  for (const Sink& s : sink) all += s.f;
  volatile float observed = all;
  (void)observed;
  return best;
}

}  // namespace

double measure_fma_gflop_per_s(ThreadPool& pool, Isa isa, const ProbeOptions& opt) {
  const bool avx2 = use_avx2(isa);
  return measure_rate(pool, opt, opt.fma_iters,
                      2 * (avx2 ? detail::kFmaPerIterAvx2 : detail::kFmaPerIterScalar),
                      [&](int64_t iters, int64_t c) {
                        return fma_loop(avx2, iters, 0.5f + 1e-3f * static_cast<float>(c));
                      });
}

void measure_wide_roofs(ThreadPool& pool, Isa isa, const ProbeOptions& opt, ThreadLimits& t) {
#if SQUEEZE_HAVE_AVX2_PROBE
  if (uses_avx512(isa) && cpu_has_avx512()) {
    t.fma512_gflop_per_s = measure_rate(pool, opt, opt.fma_iters, 2 * detail::kFmaPerIterAvx512,
                                        [](int64_t iters, int64_t c) {
                                          return detail::fma_loop_avx512(iters, 0.5f + 1e-3f * static_cast<float>(c));
                                        });
    t.vnni_gop_per_s = measure_rate(pool, opt, opt.fma_iters, detail::kVnniOpsPerIter,
                                    [](int64_t iters, int64_t c) {
                                      return static_cast<float>(detail::vnni_loop(iters, static_cast<int32_t>(c)));
                                    });
  }
  if (isa == Isa::Amx && cpu_has_amx()) {
    // A step of four tile products takes about as long as 8 steps of the FMA loop.
    const int64_t iters = opt.fma_iters / 8;
    t.amx_int8_gop_per_s = measure_rate(pool, opt, iters, detail::kAmxInt8OpsPerIter,
                                        [](int64_t n, int64_t c) {
                                          return static_cast<float>(detail::amx_int8_loop(n, static_cast<int32_t>(c)));
                                        });
    t.amx_bf16_gflop_per_s = measure_rate(pool, opt, iters, detail::kAmxBf16OpsPerIter,
                                          [](int64_t n, int64_t c) {
                                            return detail::amx_bf16_loop(n, c % 2 == 0 ? 1.0f : -1.0f);
                                          });
  }
#else
  (void)pool, (void)isa, (void)opt, (void)t;
#endif
}

PrefillRoof prefill_roof(const ThreadLimits& t, formats::DType type, Isa isa) {
  using formats::DType;
  // The formats with AVX-512 VNNI tiles (docs/FORMATS.md).
  const bool integer = type == DType::Q4_0 || type == DType::Q4_1 || type == DType::Q8_0 ||
                       formats::is_sq(type);
  const bool f16 = type == DType::F16;
  auto pick = [&](const char* name, double v) -> PrefillRoof {
    if (v > 0) return {name, v};
    return {"FP32 FMA", t.fma_gflop_per_s};
  };
  if (isa == Isa::Amx && (type == DType::Q4_0 || type == DType::Q8_0)) {
    return pick("AMX int8", t.amx_int8_gop_per_s);
  }
  if (isa == Isa::Amx && f16) return pick("AMX bf16", t.amx_bf16_gflop_per_s);
  if (uses_avx512(isa) && integer) return pick("int8 VNNI", t.vnni_gop_per_s);
  if (uses_avx512(isa) && f16) return pick("FP32 FMA 512-bit", t.fma512_gflop_per_s);
  return {"FP32 FMA", t.fma_gflop_per_s};
}

MachineLimits measure_machine(int threads, Isa isa, const ProbeOptions& opt) {
  if (threads < 1) throw UsageError("the machine probe needs at least one thread");
  use_avx2(isa);
  MachineLimits m;
  m.isa = std::string(isa_name(isa));
  m.date = today();
  const size_t n_words = std::max(opt.buffer_bytes / sizeof(uint64_t), detail::kReadBlockWords);
  m.buffer_bytes = n_words * sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> words(new uint64_t[n_words]);
  std::vector<int> counts = {1};
  if (threads > 1) counts.push_back(threads);
  for (int n : counts) {
    ThreadPool pool(n);
    // First touch from the pool's threads, so every page is mapped before timing.
    const int64_t n_fill = static_cast<int64_t>((n_words + 4095) / 4096);
    pool.run_chunks(n_fill, [&](int64_t c, int) {
      const size_t b = static_cast<size_t>(c) * 4096, e = std::min(n_words, b + 4096);
      for (size_t i = b; i < e; ++i) words[i] = i * 0x9e3779b97f4a7c15ull;
    });
    ThreadLimits t;
    t.threads = n;
    t.read_gb_per_s = measure_read_gb_per_s(pool, isa, words.get(), n_words, opt.passes);
    t.fma_gflop_per_s = measure_fma_gflop_per_s(pool, isa, opt);
    measure_wide_roofs(pool, isa, opt, t);
    m.by_threads.push_back(t);
  }
  return m;
}

std::string default_machine_file() {
  fs::path dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x == '/') {
    dir = x;
  } else if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    dir = fs::path(h) / ".cache";
  } else {
    throw UsageError("neither $XDG_CACHE_HOME nor $HOME is set: pass --machine-file");
  }
  return (dir / "squeeze" / "machine.json").string();
}

namespace {

json entry_json(const MachineLimits& m, const ThreadLimits& t) {
  return {{"isa", m.isa},
          {"threads", t.threads},
          {"read_gb_per_s", t.read_gb_per_s},
          {"fma_gflop_per_s", t.fma_gflop_per_s},
          {"fma512_gflop_per_s", t.fma512_gflop_per_s},
          {"vnni_gop_per_s", t.vnni_gop_per_s},
          {"amx_int8_gop_per_s", t.amx_int8_gop_per_s},
          {"amx_bf16_gflop_per_s", t.amx_bf16_gflop_per_s},
          {"buffer_bytes", m.buffer_bytes},
          {"date", m.date}};
}

}  // namespace

std::optional<std::vector<MachineLimits>> read_machine_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path);
  if (!in) throw FormatError("cannot read the machine file " + path);
  std::vector<MachineLimits> out;
  try {
    const json j = json::parse(in);
    for (const json& e : j.at("entries")) {
      MachineLimits m;
      m.isa = e.at("isa").get<std::string>();
      m.buffer_bytes = e.at("buffer_bytes").get<size_t>();
      m.date = e.at("date").get<std::string>();
      // The wide roofs are absent from files of older versions: 0, not measured.
      m.by_threads.push_back({e.at("threads").get<int>(), e.at("read_gb_per_s").get<double>(),
                              e.at("fma_gflop_per_s").get<double>(),
                              e.value("fma512_gflop_per_s", 0.0), e.value("vnni_gop_per_s", 0.0),
                              e.value("amx_int8_gop_per_s", 0.0),
                              e.value("amx_bf16_gflop_per_s", 0.0)});
      out.push_back(std::move(m));
    }
  } catch (const json::exception& e) {
    throw FormatError("the machine file " + path + " is malformed (" + e.what() +
                      "); delete it and run `squeeze bench --machine`");
  }
  return out;
}

void write_machine_file(const std::string& path, const MachineLimits& m) {
  json entries = json::array();
  if (auto old = read_machine_file(path)) {
    for (const MachineLimits& o : *old) {
      const ThreadLimits& t = o.by_threads.front();
      if (o.isa != m.isa || m.find(t.threads) == nullptr) entries.push_back(entry_json(o, t));
    }
  }
  for (const ThreadLimits& t : m.by_threads) entries.push_back(entry_json(m, t));
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  AtomicFile out(path);
  out.write(json{{"entries", entries}}.dump(2) + "\n");
  out.commit();
}

std::optional<ThreadLimits> cached_limits(const std::string& path, Isa isa, int threads) {
  const auto all = read_machine_file(path);
  if (!all) return std::nullopt;
  for (const MachineLimits& m : *all) {
    if (m.isa == isa_name(isa) && m.find(threads) != nullptr) return *m.find(threads);
  }
  return std::nullopt;
}

std::string machine_to_json(const MachineLimits& m) {
  json rows = json::array();
  for (const ThreadLimits& t : m.by_threads) {
    rows.push_back({{"threads", t.threads},
                    {"read_gb_per_s", t.read_gb_per_s},
                    {"fma_gflop_per_s", t.fma_gflop_per_s},
                    {"fma512_gflop_per_s", t.fma512_gflop_per_s},
                    {"vnni_gop_per_s", t.vnni_gop_per_s},
                    {"amx_int8_gop_per_s", t.amx_int8_gop_per_s},
                    {"amx_bf16_gflop_per_s", t.amx_bf16_gflop_per_s}});
  }
  return json{{"isa", m.isa}, {"buffer_bytes", m.buffer_bytes}, {"date", m.date},
              {"by_threads", rows}}
      .dump(2);
}

std::string machine_to_text(const MachineLimits& m) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "machine limits (" << m.date << ", probe isa " << m.isa << ", read buffer "
     << (m.buffer_bytes >> 20) << " MiB, best of passes)\n"
     << "| threads | read GB/s | FP32 FMA GFLOP/s | FMA 512-bit GFLOP/s | int8 VNNI GOP/s | "
        "AMX int8 GOP/s | AMX bf16 GFLOP/s |\n|---:|---:|---:|---:|---:|---:|---:|\n";
  auto cell = [&](double v) {
    if (v > 0) os << v;
    os << " |";
  };
  for (const ThreadLimits& t : m.by_threads) {
    os << "| " << t.threads << " | " << t.read_gb_per_s << " | " << t.fma_gflop_per_s << " |";
    for (double v : {t.fma512_gflop_per_s, t.vnni_gop_per_s, t.amx_int8_gop_per_s, t.amx_bf16_gflop_per_s}) {
      os << " ";
      cell(v);
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace squeeze::eval
