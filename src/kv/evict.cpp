#include "kv/evict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/error.h"

namespace squeeze::kv {

namespace {

struct PolicyName {
  EvictPolicy policy;
  const char* name;
};
constexpr PolicyName kPolicies[] = {{EvictPolicy::None, "none"},     {EvictPolicy::Streaming, "streaming"},
                                    {EvictPolicy::H2O, "h2o"},       {EvictPolicy::SnapKV, "snapkv"},
                                    {EvictPolicy::VATP, "vatp"},     {EvictPolicy::A2SF, "a2sf"},
                                    {EvictPolicy::Keyformer, "keyformer"}};

}  // namespace

EvictPolicy parse_evict_policy(std::string_view name) {
  for (const PolicyName& p : kPolicies) {
    if (name == p.name) return p.policy;
  }
  throw UsageError("unknown eviction policy '" + std::string(name) +
                   "' (none, streaming, h2o, snapkv, vatp, a2sf, keyformer)");
}

std::string evict_policy_name(EvictPolicy p) {
  for (const PolicyName& n : kPolicies) {
    if (n.policy == p) return n.name;
  }
  return "?";
}

EvictOptions resolved(const EvictOptions& o) {
  EvictOptions r = o;
  if (r.sinks < 0) r.sinks = o.policy == EvictPolicy::Streaming ? 4 : 0;
  if (r.recent < 0) {
    switch (o.policy) {
      case EvictPolicy::Streaming: r.recent = std::max<int64_t>(0, o.budget - r.sinks); break;
      case EvictPolicy::SnapKV: r.recent = o.window; break;
      default: r.recent = o.budget / 2; break;
    }
  }
  return r;
}

void check_evict_options(const EvictOptions& in) {
  if (!in.on()) return;
  const EvictOptions o = resolved(in);
  const std::string who = "--kv-evict " + evict_policy_name(o.policy);
  if (o.budget < 1) throw UsageError(who + " needs a --kv-budget of at least one token");
  if (o.sinks + o.recent > o.budget) {
    throw UsageError(who + ": the sinks (" + std::to_string(o.sinks) + ") and recent tokens (" +
                     std::to_string(o.recent) + ") exceed the budget of " +
                     std::to_string(o.budget));
  }
  if (o.window < 1) throw UsageError(who + ": the observation window must be at least 1");
  if (o.pool < 1 || o.pool % 2 == 0) throw UsageError(who + ": the pooling kernel must be odd and positive");
  if (!(o.alpha > 0 && o.alpha <= 1)) throw UsageError(who + ": the decay alpha must be in (0, 1]");
  if (!(o.tau > 0 && o.tau < 1e6)) throw UsageError(who + ": the temperature tau must be positive");
  if (!(o.tau_end == 0 || (o.tau_end > 0 && o.tau_end < 1e6))) {
    throw UsageError(who + ": the final temperature tau-end must be positive");
  }
}

int64_t evict_capacity(const EvictOptions& o, int64_t n_ctx, int64_t n_batch, int64_t n_seq) {
  if (!o.on()) return 0;
  const int64_t per_seq = o.budget + n_batch + 64;
  return per_seq < n_ctx ? n_seq * per_seq : 0;
}

std::string describe(const EvictOptions& in) {
  if (!in.on()) return "none";
  const EvictOptions o = resolved(in);
  std::string s = evict_policy_name(o.policy) + " (budget " + std::to_string(o.budget) +
                  ", sinks " + std::to_string(o.sinks) + ", recent " + std::to_string(o.recent);
  if (o.policy == EvictPolicy::SnapKV) {
    s += ", window " + std::to_string(o.window) + ", pool " + std::to_string(o.pool);
  }
  if (o.policy == EvictPolicy::A2SF || o.policy == EvictPolicy::Keyformer) {
    char buf[48];
    std::snprintf(buf, sizeof buf, o.policy == EvictPolicy::A2SF ? ", alpha %g" : ", tau %g",
                  o.policy == EvictPolicy::A2SF ? o.alpha : o.tau);
    s += buf;
    if (o.policy == EvictPolicy::Keyformer && o.tau_end > 0) {
      std::snprintf(buf, sizeof buf, " to %g", o.tau_end);
      s += buf;
    }
  }
  return s + ")";
}

bool needs_attention(const EvictOptions& o) {
  return o.on() && o.policy != EvictPolicy::Streaming;
}

void EvictScores::reset(int64_t slots, int64_t capacity) {
  n_slots = slots;
  stride = capacity;
  acc.assign(static_cast<size_t>(slots * capacity), 0.0f);
}

void begin_chunk(const EvictOptions& o, EvictScores& s, int64_t len, int64_t n,
                 std::vector<float>& weights) {
  weights.assign(static_cast<size_t>(n), 1.0f);
  if (o.policy == EvictPolicy::A2SF) {
    const auto decay = static_cast<float>(std::pow(o.alpha, static_cast<double>(n)));
    for (int64_t sl = 0; sl < s.n_slots; ++sl) {
      float* a = s.slot(sl);
      for (int64_t j = 0; j < len; ++j) a[j] *= decay;
    }
    for (int64_t t = 0; t < n; ++t) {
      weights[static_cast<size_t>(t)] = static_cast<float>(std::pow(o.alpha, static_cast<double>(n - 1 - t)));
    }
  } else if (o.policy == EvictPolicy::SnapKV) {
    if (n >= o.window) {
      std::fill(s.acc.begin(), s.acc.end(), 0.0f);
      std::fill_n(weights.begin(), n - o.window, 0.0f);
    }
  }
}

void token_scores(const EvictOptions& o, const EvictScores& s, int64_t n,
                  std::span<const float> value_norms, std::vector<float>& out) {
  out.assign(static_cast<size_t>(n), 0.0f);
  const int64_t half = o.policy == EvictPolicy::SnapKV ? o.pool / 2 : 0;
  for (int64_t sl = 0; sl < s.n_slots; ++sl) {
    const float* a = s.slot(sl);
    for (int64_t j = 0; j < n; ++j) {
      float x = a[j];
      if (half > 0) {
        for (int64_t i = std::max<int64_t>(0, j - half); i <= std::min(n - 1, j + half); ++i) x = std::max(x, a[i]);
      }
      if (o.policy == EvictPolicy::VATP) x *= value_norms[static_cast<size_t>(sl * n + j)];
      out[static_cast<size_t>(j)] += x;
    }
  }
}

std::vector<int32_t> select_kept(const EvictOptions& in, int64_t n, std::span<const float> scores) {
  const EvictOptions o = resolved(in);
  std::vector<int32_t> kept;
  if (n <= o.budget) {
    kept.resize(static_cast<size_t>(n));
    std::iota(kept.begin(), kept.end(), 0);
    return kept;
  }
  const int64_t sinks = std::min(o.sinks, n), recent = std::min(o.recent, n - sinks);
  const int64_t heavy = o.budget - sinks - recent;
  std::vector<int32_t> middle(static_cast<size_t>(n - sinks - recent));
  std::iota(middle.begin(), middle.end(), static_cast<int32_t>(sinks));
  if (heavy > 0 && !scores.empty()) {
    std::stable_sort(middle.begin(), middle.end(), [&](int32_t a, int32_t b) {
      return scores[static_cast<size_t>(a)] > scores[static_cast<size_t>(b)];
    });
  }
  // Without scores (streaming, whose recent window fills the budget) the middle's newest.
  const auto take = static_cast<size_t>(std::max<int64_t>(0, heavy));
  if (scores.empty()) middle.erase(middle.begin(), middle.end() - static_cast<std::ptrdiff_t>(take));
  middle.resize(take);
  for (int32_t j = 0; j < sinks; ++j) kept.push_back(j);
  kept.insert(kept.end(), middle.begin(), middle.end());
  for (int64_t j = n - recent; j < n; ++j) kept.push_back(static_cast<int32_t>(j));
  std::sort(kept.begin(), kept.end());
  return kept;
}

void compact(EvictScores& s, std::span<const int32_t> kept) {
  for (int64_t sl = 0; sl < s.n_slots; ++sl) {
    float* a = s.slot(sl);
    for (size_t i = 0; i < kept.size(); ++i) a[i] = a[kept[i]];
    std::fill(a + kept.size(), a + s.stride, 0.0f);
  }
}

}  // namespace squeeze::kv
