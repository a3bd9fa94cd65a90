// serve::Scheduler on a KV cache alone (no model): the token budget, decodes before prompt
// chunks, admission by slots and blocks, prefix reuse, preemption by recompute, cancellation.
#include "serve/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace squeeze::serve {
namespace {

std::shared_ptr<Sequence> seq(int64_t n_prompt, int32_t first = 0) {
  auto s = std::make_shared<Sequence>();
  s->tokens.resize(static_cast<size_t>(n_prompt));
  std::iota(s->tokens.begin(), s->tokens.end(), first);
  s->n_prompt = n_prompt;
  return s;
}

// Runs a plan as the engine would: the cache takes the tokens, a sequence whose logits came
// back gets one more token (its forks made first).
void run(Scheduler& sched, kv::KvCache& kv, const Plan& plan) {
  for (const PlanItem& it : plan.items) {
    Sequence& s = *it.seq;
    ASSERT_TRUE(kv.prepare(s.slot, it.n));
    kv.commit(s.slot, std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.n_computed),
                                                                 static_cast<size_t>(it.n)));
    s.n_computed += it.n;
  }
  for (const PlanItem& it : plan.items) {
    if (!it.logits) continue;
    for (const auto& f : sched.fork(*it.seq)) f->tokens.push_back(7);
    it.seq->tokens.push_back(7);
  }
}

int64_t planned(const Plan& p, const Sequence& s) {
  for (const PlanItem& it : p.items) {
    if (it.seq.get() == &s) return it.n;
  }
  return 0;
}

TEST(Scheduler, FillsTheBudgetWithDecodesFirstThenPromptChunks) {
  kv::KvCache kv(1, 4, 1024, 4);
  Scheduler sched(kv, {64, 8});
  auto a = seq(100), b = seq(50, 1000), c = seq(10, 2000);
  ASSERT_TRUE(sched.enqueue(a));
  ASSERT_TRUE(sched.enqueue(b));
  ASSERT_TRUE(sched.enqueue(c));
  Plan p = sched.schedule();
  EXPECT_EQ(planned(p, *a), 64);
  EXPECT_EQ(p.n_tokens(), 64);
  EXPECT_EQ(sched.n_running(), 1) << "the budget is spent: b and c wait";
  run(sched, kv, p);
  p = sched.schedule();
  EXPECT_EQ(planned(p, *a), 36);
  EXPECT_EQ(planned(p, *b), 28);
  EXPECT_FALSE(p.items[1].logits);
  run(sched, kv, p);
  p = sched.schedule();  // a decodes (1), b finishes its prompt (22), c's prompt (10)
  EXPECT_EQ(planned(p, *a), 1);
  EXPECT_TRUE(p.items[0].logits);
  EXPECT_EQ(planned(p, *b), 22);
  EXPECT_EQ(planned(p, *c), 10);
  EXPECT_EQ(p.n_tokens(), 33);
}

TEST(Scheduler, NeverFeedsALoneTokenOfALongerPrompt) {
  kv::KvCache kv(1, 4, 1024, 4);
  Scheduler sched(kv, {33, 8});
  auto a = seq(34), b = seq(40, 500);
  sched.enqueue(a);
  Plan p = sched.schedule();
  EXPECT_EQ(planned(p, *a), 32) << "33 would leave one token for the next step";
  run(sched, kv, p);
  sched.enqueue(b);
  p = sched.schedule();
  EXPECT_EQ(planned(p, *a), 2);
  EXPECT_EQ(planned(p, *b), 31);
}

TEST(Scheduler, AdmitsBySlotsAndByTheBlocksOfTheWholePrompt) {
  kv::KvCache kv(1, 4, 64, 2);  // 4 blocks, 2 slots
  Scheduler sched(kv, {512, 8});
  auto a = seq(40), b = seq(10, 100), c = seq(5, 200);
  sched.enqueue(a);
  sched.enqueue(b);
  sched.enqueue(c);
  Plan p = sched.schedule();
  EXPECT_EQ(sched.n_running(), 2) << "two slots";
  run(sched, kv, p);
  sched.finish(*b);
  auto d = seq(60, 300);  // needs 4 blocks: only 1 is free
  sched.enqueue(d);
  p = sched.schedule();
  EXPECT_EQ(planned(p, *c), 5) << "c takes b's slot";
  run(sched, kv, p);
  sched.finish(*c);
  p = sched.schedule();
  EXPECT_EQ(planned(p, *d), 0) << "d waits for blocks";
  EXPECT_EQ(sched.n_waiting(), 1);
  sched.finish(*a);
  p = sched.schedule();
  EXPECT_EQ(planned(p, *d), 60);
}

TEST(Scheduler, TakesThePromptPrefixFromTheCache) {
  kv::KvCache kv(1, 4, 256, 2);
  Scheduler sched(kv, {512, 8});
  auto a = seq(40);
  sched.enqueue(a);
  run(sched, kv, sched.schedule());
  sched.finish(*a);  // its two full blocks stay cached
  auto b = seq(45);  // the same first 40 tokens
  sched.enqueue(b);
  const Plan p = sched.schedule();
  EXPECT_EQ(b->n_cached, 32);
  EXPECT_EQ(planned(p, *b), 13);
}

TEST(Scheduler, PreemptsTheLatestAdmittedAndRecomputesIt) {
  kv::KvCache kv(1, 4, 80, 2);  // 5 blocks
  Scheduler sched(kv, {512, 8});
  auto a = seq(31), b = seq(31, 100);  // 2 blocks each, then one more to decode past 32
  sched.enqueue(a);
  sched.enqueue(b);
  run(sched, kv, sched.schedule());  // prompts: the tokens at 31 come back
  Plan p = sched.schedule();  // decodes at position 31: still in the second block
  ASSERT_EQ(p.n_tokens(), 2);
  run(sched, kv, p);
  p = sched.schedule();  // position 32 needs a block each; one is free
  EXPECT_EQ(p.n_preempted, 1);
  EXPECT_EQ(planned(p, *a), 1);
  EXPECT_EQ(b->slot, -1);
  EXPECT_EQ(b->n_computed, 0) << "recomputed from its tokens";
  EXPECT_EQ(sched.n_waiting(), 1);
  run(sched, kv, p);
  sched.finish(*a);
  p = sched.schedule();
  // Its full blocks come back from the prefix cache but for the last, which would leave one
  // token: at least two run as a chunk.
  EXPECT_EQ(b->n_computed, 16);
  EXPECT_EQ(planned(p, *b), 17);
  EXPECT_TRUE(p.items[0].logits);
}

TEST(Scheduler, DropsCancelledSequencesAndFreesTheirBlocks) {
  kv::KvCache kv(1, 4, 256, 2);
  Scheduler sched(kv, {512, 8});
  auto a = seq(20), b = seq(20, 100), c = seq(5, 200);
  sched.enqueue(a);
  sched.enqueue(b);
  sched.enqueue(c);
  run(sched, kv, sched.schedule());
  EXPECT_EQ(kv.blocks().n_used(), 4);
  a->cancelled = true;
  c->cancelled = true;  // still waiting
  const Plan p = sched.schedule();
  ASSERT_EQ(p.dropped.size(), 2u);
  EXPECT_EQ(kv.blocks().n_used(), 2);
  EXPECT_EQ(sched.n_running(), 1);
  EXPECT_EQ(sched.n_waiting(), 0);
}

TEST(Scheduler, ForksTakeSlotsAtAdmissionAndShareThePrompt) {
  kv::KvCache kv(1, 4, 256, 3);
  Scheduler sched(kv, {512, 8});
  auto a = seq(20);
  a->forks = {std::make_shared<Sequence>(), std::make_shared<Sequence>()};
  const auto f1 = a->forks[0], f2 = a->forks[1];
  auto b = seq(4, 100);
  sched.enqueue(a);
  sched.enqueue(b);
  Plan p = sched.schedule();
  EXPECT_EQ(sched.n_running(), 1) << "a holds all three slots";
  EXPECT_GE(f2->slot, 0);
  run(sched, kv, p);
  EXPECT_EQ(sched.n_running(), 3);
  EXPECT_EQ(f1->n_computed, 20);
  EXPECT_EQ(kv.blocks().n_used(), 2) << "shared";
  p = sched.schedule();
  EXPECT_EQ(p.n_tokens(), 3);
}

TEST(Scheduler, TheQueueIsBounded) {
  kv::KvCache kv(1, 4, 64, 1);
  Scheduler sched(kv, {512, 2});
  EXPECT_TRUE(sched.enqueue(seq(3)));
  EXPECT_TRUE(sched.enqueue(seq(3)));
  EXPECT_FALSE(sched.enqueue(seq(3)));
  auto wide = seq(3);
  wide->forks = {std::make_shared<Sequence>()};
  Scheduler one(kv, {512, 8});
  EXPECT_THROW(one.enqueue(wide), UsageError) << "two choices, one slot";
}

}  // namespace
}  // namespace squeeze::serve
