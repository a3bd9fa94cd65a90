// The serving engine: requests from any thread, one engine thread that schedules
// (scheduler.h), runs each step as one batch through the model (model::Context::decode_batch:
// every weight matrix read once for all sequences), samples every sequence whose logits came
// back, and sends each choice's text to its RequestStream (stop strings held back and cut).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "model/context.h"
#include "model/model.h"
#include "serve/metrics.h"
#include "serve/request.h"
#include "serve/scheduler.h"
#include "serve/split_policy.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::serve {

struct EngineConfig {
  int64_t n_ctx = 4096;        // the most tokens of one sequence, prompt and output
  int64_t parallel = 8;        // sequences running at once
  int64_t kv_tokens = 0;       // KV cache capacity in tokens (0: n_ctx * parallel)
  int64_t batch_tokens = 512;  // tokens per step
  int64_t max_queue = 64;      // requests waiting
  bool prefix_cache = true;    // reuse cached KV blocks of a prompt's prefix
  // With activation sparsity (context().set_act_sparsity): whether a step of a few decodes
  // runs as one-token passes (split_policy.h; Auto: whichever it measures faster).
  SplitMode split = SplitMode::Auto;
  kv::KvOptions kv{};  // the KV cache's storage
};

class Engine {
 public:
  // The model, tokenizer and pool must outlive the engine. Throws UsageError for a bad config.
  Engine(const model::Model& m, const tokenizer::Tokenizer& tok, ThreadPool& pool,
         const EngineConfig& config);
  ~Engine();

  // Queues a request (any thread); its results come on the returned stream. Returns null when
  // the queue is full or the engine is stopping. Throws UsageError for an empty prompt, one
  // that leaves no room to generate within n_ctx, or more choices than `parallel`.
  std::shared_ptr<RequestStream> submit(std::vector<int32_t> prompt, const GenParams& params);

  // One step (the engine's thread only): takes queued requests, drops cancelled ones, runs the
  // scheduler's plan, samples. Returns false when there was nothing to do.
  bool step();
  // Steps until stop(); sleeps while there is nothing to do.
  void run();
  // Stops taking requests; run() returns once every request taken has finished (drain) or,
  // with cancel, after cancelling them.
  void stop(bool cancel = false);

  EngineMetrics metrics() const;
  const EngineConfig& config() const { return config_; }
  const model::Context& context() const { return ctx_; }
  // For set-up before run() (an activation-sparsity policy: Context::set_act_sparsity).
  model::Context& context() { return ctx_; }

 private:
  struct Request;
  struct Seq;
  void take_incoming();
  // Runs the plan items as one batch through the model and samples those with logits.
  void run_items(std::span<const PlanItem> items);
  // Draws s's next token from its logits row and sends what text is safe to send.
  void sample(Seq& s, std::span<const float> logits);
  // Sends s's pending text up to a stop string or up to a tail that may begin one; true when
  // a stop string was found (the text after it is dropped).
  bool emit(Seq& s);
  // Sends s's last text and finish reason, releases its slot; the request's usage goes out
  // with its last choice.
  void finish(Seq& s, Finish reason);

  const model::Model& model_;
  const tokenizer::Tokenizer& tok_;
  EngineConfig config_;
  model::Context ctx_;
  Scheduler sched_;
  SplitPolicy split_;
  std::vector<std::shared_ptr<Seq>> live_;  // every sequence taken and not finished

  mutable std::mutex mu_;  // guards what follows
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Seq>> incoming_;
  int64_t queued_ = 0;  // requests incoming or waiting
  bool stopping_ = false;
  bool cancel_all_ = false;
  EngineMetrics metrics_;
};

}  // namespace squeeze::serve
