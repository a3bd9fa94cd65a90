// Continuous batching, as vLLM schedules it: every step decodes one token of each running
// sequence and fills the rest of a token budget with prompt chunks (chunked prefill: a long
// prompt never stalls the running decodes); a waiting request is admitted when a sequence slot
// and the KV blocks of its whole prompt are free, taking what the prefix cache holds of its
// prompt first; when a decode finds no block, the most recently admitted sequence is preempted
// (its blocks released, its tokens recomputed later). The scheduler only plans: the engine
// (engine.h) runs the plan and samples.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "kv/kv_cache.h"

namespace squeeze::serve {

// One generated choice of a request. The scheduler reads and moves the fields of this struct;
// the engine derives from it to keep its sampling and output state (engine.cpp).
struct Sequence {
  virtual ~Sequence() = default;
  std::vector<int32_t> tokens;  // the prompt, then the generated tokens
  int64_t n_prompt = 0;
  int64_t n_computed = 0;       // tokens whose K and V are in the cache (positions 0..)
  int32_t slot = -1;            // the KV cache sequence it runs in; -1 while waiting
  int64_t n_cached = 0;         // prompt tokens the prefix cache gave at its first admission
  bool admitted_once = false;
  bool cancelled = false;       // set by the engine; dropped at the next schedule()
  // Choices 2..n of the request: each takes a slot at admission and is forked from this one
  // when its prompt is done (kv::KvCache::fork), then runs as a sequence of its own.
  std::vector<std::shared_ptr<Sequence>> forks;
  int64_t remaining() const { return static_cast<int64_t>(tokens.size()) - n_computed; }
};

struct SchedulerConfig {
  int64_t batch_tokens = 512;  // tokens per step, decodes and prompt chunks together
  int64_t max_queue = 256;     // waiting sequences (not counting their forks)
  bool prefix_cache = true;    // admission starts after the longest cached prefix
};

// A step's work: feed tokens [n_computed, n_computed + n) of seq; logits: the last of them
// needs its logits (the sequence's prompt or recomputed tokens are done).
struct PlanItem {
  std::shared_ptr<Sequence> seq;
  int64_t n = 0;
  bool logits = false;
};

struct Plan {
  std::vector<PlanItem> items;
  std::vector<std::shared_ptr<Sequence>> dropped;  // cancelled: slots and blocks released
  int64_t n_preempted = 0;
  int64_t n_tokens() const;
};

class Scheduler {
 public:
  // kv: its sequences are the slots; it must outlive the scheduler.
  Scheduler(kv::KvCache& kv, SchedulerConfig config);

  // Queues a sequence (with its forks). False when the queue is full.
  bool enqueue(std::shared_ptr<Sequence> seq);
  // Plans the next step (see the top of this file). Blocks are counted, not taken: the step's
  // Context::decode_batch takes them, and the plan fits in what is available.
  Plan schedule();
  // The forks of seq (its prompt done, its slot holding the prompt's K and V) become running
  // sequences sharing its blocks; returns them.
  std::vector<std::shared_ptr<Sequence>> fork(Sequence& seq);
  // A finished sequence leaves: its slot and blocks are released (idle full blocks stay in
  // the prefix cache).
  void finish(Sequence& seq);

  int64_t n_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t n_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  const kv::KvCache& kv() const { return kv_; }

 private:
  int32_t take_slot();
  void release(Sequence& seq);
  // Preempts the most recently admitted running sequence other than `keep` (any, when null).
  bool preempt(const Sequence* keep, Plan& plan);
  // The most tokens of seq's remaining ones that `blocks` more blocks hold.
  int64_t fits(const Sequence& seq, int64_t blocks) const;

  kv::KvCache& kv_;
  SchedulerConfig config_;
  std::vector<std::shared_ptr<Sequence>> running_;  // in admission order
  std::deque<std::shared_ptr<Sequence>> waiting_;   // a preempted sequence goes to the front
  std::vector<int32_t> free_slots_;
};

}  // namespace squeeze::serve
