// A persistent pool of worker threads with dynamic work claiming.
//
// A parallel region is split into chunks; the calling thread and the workers claim chunks from
// one atomic counter until none is left. So a worker that the OS has not scheduled (a loaded
// machine) delays nothing: the others take its share. No allocation per region.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace squeeze {

class ThreadPool {
 public:
  // Runs chunk `chunk` on thread `ith` (0 = the calling thread, < size()). A non-owning
  // reference to any callable (no allocation per region, unlike std::function); the callable
  // must outlive the run_chunks call, which a lambda passed directly does.
  class ChunkFn {
   public:
    template <typename F>
    ChunkFn(const F& f)  // NOLINT(google-explicit-constructor): lambdas convert implicitly
        : obj_(&f), call_([](const void* o, int64_t c, int i) { (*static_cast<const F*>(o))(c, i); }) {}
    void operator()(int64_t chunk, int ith) const { call_(obj_, chunk, ith); }

   private:
    const void* obj_;
    void (*call_)(const void*, int64_t, int);
  };

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn for every chunk in [0, n_chunks) and returns when all are done.
  void run_chunks(int64_t n_chunks, const ChunkFn& fn);

  // Splits [0, n) into ranges of whole multiples of `grain` (a few per thread, for balance)
  // and calls body(begin, end, ith) for each.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& body) {
    if (n <= 0) return;
    const int64_t units = (n + grain - 1) / grain;
    const int64_t n_chunks = std::min<int64_t>(units, n_threads_ == 1 ? 1 : 4 * n_threads_);
    const int64_t per = (units + n_chunks - 1) / n_chunks;
    run_chunks(n_chunks, [&](int64_t c, int ith) {
      const int64_t begin = std::min(n, c * per * grain);
      const int64_t end = std::min(n, (c + 1) * per * grain);
      if (begin < end) body(begin, end, ith);
    });
  }

  // Number of hardware threads, at least 1.
  static int default_threads();

 private:
  // state_ packs the region: generation (16 bits) | chunk count (24) | next chunk (24).
  static constexpr int kChunkBits = 24;
  static constexpr uint64_t kChunkMask = (uint64_t{1} << kChunkBits) - 1;

  void worker_loop(int ith);
  // Claims and runs chunks of the region described by a state word; returns when exhausted.
  void work(int ith);

  int n_threads_;
  std::vector<std::thread> workers_;
  const ChunkFn* fn_[2] = {nullptr, nullptr};  // task of even / odd generations
  std::atomic<int64_t> done_[2];                // chunks completed, per parity
  std::atomic<uint64_t> state_{0};
  std::atomic<uint32_t> wake_{0};    // futex word workers sleep on
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  uint64_t generation_ = 0;          // written by the owner thread only
};

}  // namespace squeeze
