#include "serve/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace squeeze::serve {

int64_t Plan::n_tokens() const {
  int64_t n = 0;
  for (const PlanItem& it : items) n += it.n;
  return n;
}

Scheduler::Scheduler(kv::KvCache& kv, SchedulerConfig config) : kv_(kv), config_(config) {
  if (config_.batch_tokens < 1 || config_.max_queue < 1) {
    throw UsageError("the scheduler needs a token budget and a queue of at least 1");
  }
  for (auto s = static_cast<int32_t>(kv.n_seq()) - 1; s >= 0; --s) free_slots_.push_back(s);
}

bool Scheduler::enqueue(std::shared_ptr<Sequence> seq) {
  if (static_cast<int64_t>(waiting_.size()) >= config_.max_queue) return false;
  if (1 + static_cast<int64_t>(seq->forks.size()) > kv_.n_seq()) {
    throw UsageError("a request of " + std::to_string(1 + seq->forks.size()) +
                     " choices needs more than the " + std::to_string(kv_.n_seq()) +
                     " sequence slots");
  }
  waiting_.push_back(std::move(seq));
  return true;
}

int32_t Scheduler::take_slot() {
  const int32_t s = free_slots_.back();
  free_slots_.pop_back();
  return s;
}

void Scheduler::release(Sequence& seq) {
  if (seq.slot >= 0) {
    kv_.truncate(seq.slot, 0);
    free_slots_.push_back(seq.slot);
    seq.slot = -1;
  }
  for (const auto& f : seq.forks) release(*f);  // forks not yet made hold a slot only
  seq.n_computed = 0;
}

void Scheduler::finish(Sequence& seq) {
  release(seq);
  std::erase_if(running_, [&](const std::shared_ptr<Sequence>& s) { return s.get() == &seq; });
}

bool Scheduler::preempt(const Sequence* keep, Plan& plan) {
  if (running_.empty() || running_.back().get() == keep) return false;
  std::shared_ptr<Sequence> victim = running_.back();
  running_.pop_back();
  release(*victim);  // recomputed from its tokens when admitted again
  waiting_.push_front(std::move(victim));
  ++plan.n_preempted;
  return true;
}

int64_t Scheduler::fits(const Sequence& seq, int64_t blocks) const {
  int64_t lo = 0, hi = seq.remaining();  // lo fits; find the largest
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (kv_.blocks_needed(seq.slot, mid) <= blocks) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Prompt tokens to feed out of `remaining` within `limit`: never a chunk of one token of a
// longer prompt, nor one that leaves a single token. A lone token runs attention in decode's
// sum order (ops/pv.h) and the prompt's logits would then depend on how it was chunked.
static int64_t prompt_chunk(int64_t remaining, int64_t limit) {
  int64_t n = std::min(remaining, limit);
  if (remaining > 1 && remaining - n == 1) --n;
  return remaining > 1 && n < 2 ? 0 : n;
}

Plan Scheduler::schedule() {
  Plan plan;
  auto drop = [&](std::shared_ptr<Sequence> s) {
    release(*s);
    plan.dropped.push_back(std::move(s));
  };
  auto drop_cancelled = [&](const std::shared_ptr<Sequence>& s) {
    if (s->cancelled) drop(s);
    return s->cancelled;
  };
  std::erase_if(running_, drop_cancelled);
  std::erase_if(waiting_, drop_cancelled);

  int64_t budget = config_.batch_tokens;
  int64_t planned = 0;  // blocks the plan will take
  auto available = [&] { return kv_.blocks().n_available() - planned; };
  auto add = [&](const std::shared_ptr<Sequence>& s, int64_t n) {
    planned += kv_.blocks_needed(s->slot, n);
    budget -= n;
    plan.items.push_back({s, n, n == s->remaining()});
  };
  // Decodes first, in admission order; one without a block preempts the latest admitted
  // sequences after it, or steps back itself when it is the latest.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const std::shared_ptr<Sequence> s = running_[i];
    if (s->remaining() != 1) continue;
    while (kv_.blocks_needed(s->slot, 1) > available() && running_.size() > i + 1) {
      preempt(s.get(), plan);
    }
    if (kv_.blocks_needed(s->slot, 1) > available()) {
      preempt(nullptr, plan);  // s is the last: it waits for blocks
      break;
    }
    add(s, 1);
  }
  // Then the prompt chunks of admitted sequences, as much of each as budget and blocks allow.
  for (const auto& s : running_) {
    if (budget <= 0) break;
    if (s->remaining() <= 1) continue;
    const int64_t n = prompt_chunk(s->remaining(), std::min(budget, fits(*s, available())));
    if (n > 0) add(s, n);
  }
  // Then new (or preempted) sequences, first come first served, while a slot for each of their
  // choices and the blocks of their whole prompt are free.
  while (!waiting_.empty() && budget > 0) {
    const std::shared_ptr<Sequence> s = waiting_.front();
    if (static_cast<int64_t>(free_slots_.size()) < 1 + static_cast<int64_t>(s->forks.size())) break;
    s->slot = take_slot();
    // At least two tokens left (of a longer prompt) run as a prompt chunk, as the prompt alone
    // would: one token would take decode's attention, which sums in another order.
    s->n_computed = config_.prefix_cache ? kv_.reuse_prefix(s->slot, s->tokens, 2) : 0;
    if (kv_.blocks_needed(s->slot, s->remaining()) > available()) {
      release(*s);
      break;
    }
    if (!s->admitted_once) s->n_cached = s->n_computed;
    s->admitted_once = true;
    for (const auto& f : s->forks) f->slot = take_slot();
    waiting_.pop_front();
    running_.push_back(s);
    if (const int64_t n = prompt_chunk(s->remaining(), budget); n > 0) add(s, n);
  }
  return plan;
}

std::vector<std::shared_ptr<Sequence>> Scheduler::fork(Sequence& seq) {
  std::vector<std::shared_ptr<Sequence>> made;
  for (const auto& f : seq.forks) {
    kv_.fork(seq.slot, f->slot);
    f->tokens = seq.tokens;
    f->n_prompt = seq.n_prompt;
    f->n_computed = seq.n_computed;
    f->n_cached = seq.n_cached;
    f->admitted_once = true;
    running_.push_back(f);
    made.push_back(f);
  }
  seq.forks.clear();
  return made;
}

}  // namespace squeeze::serve
