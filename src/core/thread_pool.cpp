#include "core/thread_pool.h"

#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace squeeze {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}
// Spin this many rounds before sleeping: a decode step is many short regions back to back,
// so workers should rarely sleep while tokens are being generated.
constexpr int kSpinRounds = 1 << 15;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  done_[0].store(0);
  done_[1].store(0);
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_acq_rel);
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void ThreadPool::work(int ith) {
  for (;;) {
    const uint64_t s = state_.fetch_add(1, std::memory_order_acq_rel);
    const uint64_t gen = s >> (2 * kChunkBits);
    const int64_t n = static_cast<int64_t>((s >> kChunkBits) & kChunkMask);
    const int64_t c = static_cast<int64_t>(s & kChunkMask);
    if (c >= n) return;  // region exhausted (or none posted yet)
    (*fn_[gen & 1])(c, ith);
    done_[gen & 1].fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_chunks(int64_t n_chunks, const ChunkFn& fn) {
  if (n_chunks <= 0) return;
  if (n_threads_ == 1 || n_chunks == 1) {
    for (int64_t c = 0; c < n_chunks; ++c) fn(c, 0);
    return;
  }
  if (static_cast<uint64_t>(n_chunks) > kChunkMask - 1024) {
    throw std::length_error("ThreadPool: too many chunks in one region");
  }
  // The previous region of this parity finished before the previous run_chunks returned,
  // so its slot and counter are free.
  const uint64_t gen = (++generation_) & 0xFFFF;
  fn_[gen & 1] = &fn;
  done_[gen & 1].store(0, std::memory_order_relaxed);
  state_.store((gen << (2 * kChunkBits)) | (static_cast<uint64_t>(n_chunks) << kChunkBits),
               std::memory_order_release);
  if (sleepers_.load(std::memory_order_acquire) > 0) {
    wake_.fetch_add(1, std::memory_order_acq_rel);
    wake_.notify_all();
  }
  work(0);
  int spins = 0;
  while (done_[gen & 1].load(std::memory_order_acquire) != n_chunks) {
    if (++spins < kSpinRounds) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::worker_loop(int ith) {
  uint64_t seen_gen = 0;
  for (;;) {
    int spins = 0;
    for (;;) {
      if (stop_.load(std::memory_order_acquire)) return;
      const uint64_t s = state_.load(std::memory_order_acquire);
      const uint64_t gen = s >> (2 * kChunkBits);
      if (gen != seen_gen) {
        // Only claim when chunks remain, so idle spinning does not bump the counter.
        if ((s & kChunkMask) < ((s >> kChunkBits) & kChunkMask)) break;
        seen_gen = gen;
      }
      if (++spins < kSpinRounds) {
        cpu_relax();
        continue;
      }
      // Sleep until the owner posts a region while we sleep (it checks sleepers_).
      const uint32_t w = wake_.load(std::memory_order_acquire);
      sleepers_.fetch_add(1, std::memory_order_acq_rel);
      const uint64_t s2 = state_.load(std::memory_order_acquire);
      if ((s2 >> (2 * kChunkBits)) == seen_gen && !stop_.load(std::memory_order_acquire)) {
        wake_.wait(w, std::memory_order_acquire);
      }
      sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      spins = 0;
    }
    work(ith);
  }
}

}  // namespace squeeze
