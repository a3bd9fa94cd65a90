// A persistent pool of worker threads. The calling thread takes part as thread 0,
// so a pool of n threads starts n-1 workers. No allocation per parallel region.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace squeeze {

class ThreadPool {
 public:
  // The work of one parallel region: called once per thread with (thread index, thread count).
  using Task = std::function<void(int ith, int nth)>;

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs task on every thread and returns when all are done.
  void run(const Task& task);

  // Splits [0, n) into contiguous ranges of whole multiples of `grain`, one per thread.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& body) {
    run([&](int ith, int nth) {
      const int64_t chunks = (n + grain - 1) / grain;
      const int64_t per = (chunks + nth - 1) / nth;
      const int64_t begin = std::min<int64_t>(n, ith * per * grain);
      const int64_t end = std::min<int64_t>(n, (ith + 1) * per * grain);
      if (begin < end) body(begin, end, ith);
    });
  }

  // Number of hardware threads, at least 1.
  static int default_threads();

 private:
  void worker_loop(int ith);

  int n_threads_;
  std::vector<std::thread> workers_;
  const Task* task_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace squeeze
