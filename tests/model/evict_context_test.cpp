// A context with token eviction: a budget above every token changes nothing to the bit; past it
// each policy keeps exactly its budget after every chunk while positions run on; the cache it
// leaves is the one compaction by hand leaves, so the next logits are those to the bit; bad
// combinations are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kv/evict.h"
#include "model/context.h"
#include "tiny_model.h"

namespace squeeze::model {
namespace {

std::unique_ptr<Model> tiny(const char* arch) {
  testing::TinyModelSpec spec = testing::tiny_arch_spec(arch);
  spec.n_ctx_train = 256;
  spec.n_layer = 2;
  return Model::load(gguf::File::from_bytes("tiny", testing::tiny_model_writer(spec).to_bytes()));
}

std::vector<int32_t> tokens(size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 11) % 250);
  return t;
}

kv::EvictOptions policy(kv::EvictPolicy p, int64_t budget) {
  kv::EvictOptions o;
  o.policy = p;
  o.budget = budget;
  o.window = 8;
  return o;
}

// Logits of 100 tokens in chunks of 24, then 6 one at a time; checks the budget after each call.
std::vector<float> run(const Model& m, const kv::EvictOptions& o, int64_t kv_tokens = 0) {
  ThreadPool pool(2);
  Context ctx(m, 256, pool, 24, 1, kv_tokens);
  ctx.set_eviction(o);
  const std::vector<int32_t> t = tokens(106);
  std::vector<float> out;
  for (size_t i = 0; i < t.size();) {
    const size_t n = i < 100 ? std::min<size_t>(24, 100 - i) : 1;
    const auto l = ctx.decode(std::span(t).subspan(i, n), true);
    out.insert(out.end(), l.begin(), l.end());
    i += n;
    EXPECT_EQ(ctx.n_past(), static_cast<int64_t>(i));
    if (o.on()) {
      EXPECT_EQ(ctx.kv().seq_len(0), std::min<int64_t>(o.budget, static_cast<int64_t>(i)));
    }
  }
  if (o.on()) {
    EXPECT_EQ(ctx.n_evicted(), std::max<int64_t>(0, 106 - o.budget));
  }
  return out;
}

TEST(EvictContext, ABudgetAboveEveryTokenChangesNothing) {
  for (const char* arch : {"llama", "qwen3"}) {
    const auto m = tiny(arch);
    const std::vector<float> base = run(*m, {});
    for (const auto p : {kv::EvictPolicy::Streaming, kv::EvictPolicy::H2O, kv::EvictPolicy::SnapKV,
                         kv::EvictPolicy::VATP, kv::EvictPolicy::A2SF, kv::EvictPolicy::Keyformer}) {
      EXPECT_EQ(run(*m, policy(p, 200)), base) << arch << " " << kv::evict_policy_name(p);
    }
  }
}

TEST(EvictContext, EveryPolicyKeepsItsBudgetAndChangesTheLogits) {
  const auto m = tiny("llama");
  const std::vector<float> base = run(*m, {});
  for (const auto p : {kv::EvictPolicy::Streaming, kv::EvictPolicy::H2O, kv::EvictPolicy::SnapKV,
                       kv::EvictPolicy::VATP, kv::EvictPolicy::A2SF, kv::EvictPolicy::Keyformer}) {
    const kv::EvictOptions o = policy(p, 40);
    // A cache of the budget and one chunk is enough.
    const std::vector<float> l = run(*m, o, kv::evict_capacity(o, 256, 24, 1));
    const size_t first = 48 * static_cast<size_t>(m->hparams().n_vocab);  // evictions start after 48
    EXPECT_TRUE(std::equal(base.begin(), base.begin() + first, l.begin())) << kv::evict_policy_name(p);
    EXPECT_FALSE(std::equal(base.begin(), base.end(), l.begin())) << kv::evict_policy_name(p);
  }
}

TEST(EvictContext, TheCacheLeftIsCompactionByHand) {
  for (const char* arch : {"llama", "qwen3"}) {
    const auto m = tiny(arch);
    ThreadPool pool(2);
    const std::vector<int32_t> t = tokens(61);
    const kv::EvictOptions o = policy(kv::EvictPolicy::Streaming, 20);
    Context a(*m, 256, pool, 64);
    a.set_eviction(o);
    a.decode(std::span(t).first(60));  // one chunk, then one eviction
    Context b(*m, 256, pool, 64);
    b.decode(std::span(t).first(60));
    b.kv_mut().evict(0, kv::select_kept(o, 60, {}));
    EXPECT_EQ(a.kv().seq_len(0), 20);
    EXPECT_EQ(b.n_past(), 60);
    const auto la = a.decode(std::span(t).subspan(60, 1));
    const std::vector<float> first(la.begin(), la.end());
    const auto lb = b.decode(std::span(t).subspan(60, 1));
    EXPECT_TRUE(std::equal(first.begin(), first.end(), lb.begin())) << arch;
    // Kept tokens hold their own positions: the sinks, then the newest.
    std::vector<int32_t> cells;
    a.kv().cells(0, 20, cells);
    EXPECT_EQ(a.kv().cell_pos(cells[3]), 3);
    EXPECT_EQ(a.kv().cell_pos(cells[4]), 45);
    EXPECT_EQ(a.kv().cell_pos(cells[19]), 60);
  }
}

TEST(EvictContext, StatisticsSumEveryLayersAndHeadsProbabilities) {
  const auto m = tiny("qwen3");
  const HParams& hp = m->hparams();
  ThreadPool pool(2);
  Context ctx(*m, 256, pool, 24);
  ctx.set_eviction(policy(kv::EvictPolicy::H2O, 200));
  ctx.decode(tokens(30));  // a chunk of 24, one of 6
  ctx.decode(tokens(1));   // a decode step
  const kv::EvictScores* s = ctx.eviction_scores(0);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->n_slots, hp.n_layer * hp.n_head_kv);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    double sum = 0;  // each query's probabilities sum to one per head
    for (int64_t hk = 0; hk < hp.n_head_kv; ++hk) {
      for (int64_t j = 0; j < 31; ++j) sum += s->slot(il * hp.n_head_kv + hk)[j];
    }
    EXPECT_NEAR(sum, 31.0 * static_cast<double>(hp.n_head), 1e-3) << "layer " << il;
  }
  EXPECT_EQ(Context(*m, 256, pool, 24).eviction_scores(0), nullptr);
}

// Keyformer's temperature schedule reaches the statistics: a final temperature equal to the
// first changes nothing to the bit, a higher one changes them (tests/ops/attention_probs_test.cpp
// checks the arithmetic).
TEST(EvictContext, KeyformerTemperatureSchedule) {
  const auto m = tiny("llama");
  ThreadPool pool(2);
  const auto stats = [&](double tau_end) {
    Context ctx(*m, 256, pool, 24);
    kv::EvictOptions o = policy(kv::EvictPolicy::Keyformer, 200);
    o.tau_end = tau_end;
    ctx.set_eviction(o);
    ctx.decode(tokens(30));
    const kv::EvictScores* s = ctx.eviction_scores(0);
    return std::vector<float>(s->acc.begin(), s->acc.end());
  };
  const std::vector<float> fixed = stats(0), same = stats(1.0), rising = stats(100.0);
  for (size_t j = 0; j < fixed.size(); ++j) ASSERT_EQ(fixed[j], same[j]) << j;
  EXPECT_NE(fixed, rising);
  double mass_fixed = 0, mass_rising = 0;  // each query's probabilities sum to one either way
  for (size_t j = 0; j < fixed.size(); ++j) {
    mass_fixed += fixed[j];
    mass_rising += rising[j];
  }
  EXPECT_NEAR(mass_rising, mass_fixed, 1e-3 * mass_fixed);
}

TEST(EvictContext, SnapKvKeepsItsObservationWindow) {
  const auto m = tiny("llama");
  ThreadPool pool(2);
  Context ctx(*m, 256, pool, 128);
  ctx.set_eviction(policy(kv::EvictPolicy::SnapKV, 24));
  ctx.decode(tokens(100));
  std::vector<int32_t> cells;
  ctx.kv().cells(0, 24, cells);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ctx.kv().cell_pos(cells[16 + i]), 92 + i);
  ctx.truncate(50);  // by position: the kept tokens below it
  EXPECT_EQ(ctx.n_past(), 50);
  EXPECT_LT(ctx.kv().seq_len(0), 16);
  ctx.decode(tokens(3));
  EXPECT_EQ(ctx.n_past(), 53);
}

TEST(EvictContext, BadCombinationsAreRefused) {
  const auto m = tiny("llama");
  ThreadPool pool(2);
  Context q(*m, 256, pool, 24, 1, 0, {kv::KvType::Q8, kv::KeyAxis::Channel, 16, 16, 0});
  EXPECT_THROW(q.set_eviction(policy(kv::EvictPolicy::H2O, 40)), UsageError);
  Context c(*m, 256, pool, 24);
  EXPECT_THROW(c.set_eviction(policy(kv::EvictPolicy::H2O, 0)), UsageError);
  // A cache smaller than the budget and a chunk fills up: a clear error.
  Context small(*m, 256, pool, 24, 1, 48);
  small.set_eviction(policy(kv::EvictPolicy::Streaming, 40));
  EXPECT_THROW(small.decode(tokens(100)), Error);
}

}  // namespace
}  // namespace squeeze::model
