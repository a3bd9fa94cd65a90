#include "core/thread_pool.h"

#include <algorithm>

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
// Spin this many rounds before sleeping on the atomic: a decode step is a few hundred
// microseconds of parallel regions back to back, so workers should rarely sleep.
constexpr int kSpinRounds = 1 << 14;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void ThreadPool::run(const Task& task) {
  if (n_threads_ == 1) {
    task(0, 1);
    return;
  }
  task_ = &task;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  task(0, n_threads_);
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    if (++spins < kSpinRounds) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  task_ = nullptr;
}

void ThreadPool::worker_loop(int ith) {
  // Generation 0 is "no work yet": a worker that starts after the first run() was posted
  // must still see that run as new, so it does not read the current value here.
  uint32_t seen = 0;
  for (;;) {
    int spins = 0;
    uint32_t gen;
    while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinRounds) {
        cpu_relax();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    (*task_)(ith, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace squeeze
