// A request as the engine sees it, and the channel its results come back on: the engine's
// thread pushes each choice's new text (and its tokens' log-probabilities when asked), then its
// finish; the client's thread waits on them and may cancel at any time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sample/sampler.h"

namespace squeeze::serve {

struct GenParams {
  sample::SamplerParams sampling;  // choice i draws with seed sampling.seed + i
  int64_t max_tokens = -1;         // < 0: until the context is full
  std::vector<std::string> stop;   // strings that end a choice (not emitted)
  int32_t n = 1;                   // choices
  int32_t logprobs = -1;           // < 0: none; else the chosen token's and this many others'
};

enum class Finish { Stop, Length, Cancelled };

struct TokenInfo {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

// New output of one choice: text since its last event, the tokens that made it (with
// logprobs, when asked), and on its last event the finish reason.
struct Event {
  int32_t choice = 0;
  std::string text;
  std::vector<TokenInfo> tokens;
  std::optional<Finish> finish;
};

struct RequestUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

class RequestStream {
 public:
  explicit RequestStream(int32_t n_choices) : open_(n_choices) {}

  // Engine side.
  void push(Event e) {
    {
      std::lock_guard lock(mu_);
      if (e.finish) --open_;
      events_.push_back(std::move(e));
    }
    cv_.notify_all();
  }
  void set_usage(const RequestUsage& u) {
    std::lock_guard lock(mu_);
    usage_ = u;
  }

  // Client side: the next event, waiting up to `timeout`; nullopt on timeout or once every
  // choice has finished and its events were taken.
  std::optional<Event> next(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty() || open_ == 0; });
    if (events_.empty()) return std::nullopt;
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }
  // Every choice has finished and its events were taken.
  bool done() {
    std::lock_guard lock(mu_);
    return open_ == 0 && events_.empty();
  }
  RequestUsage usage() {
    std::lock_guard lock(mu_);
    return usage_;
  }
  // The engine drops the request at its next step (a client gone, a server stopping).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  int32_t open_;
  RequestUsage usage_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace squeeze::serve
