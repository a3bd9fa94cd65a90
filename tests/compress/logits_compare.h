// Comparing a pruned model's logits with a reference model's (the structured and per-domain
// pruning tests build the reference from the original with units silenced).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/context.h"
#include "model/model.h"

namespace squeeze::testing {

// The logits after a fixed 10-token prompt, one token per step.
inline std::vector<float> prompt_logits(const model::Model& m, ThreadPool& pool) {
  model::Context ctx(m, 64, pool, 1);
  const std::vector<int32_t> prompt = {5, 70, 100, 3, 200, 150, 9, 11, 255, 42};
  const auto l = ctx.decode(prompt);
  return {l.begin(), l.end()};
}

// max |a - b| <= tolerance * max |b| over prompt_logits, and the same argmax.
inline void expect_same_logits(const model::Model& a_model, const model::Model& b_model, ThreadPool& pool,
                               float tolerance) {
  const std::vector<float> a = prompt_logits(a_model, pool), b = prompt_logits(b_model, pool);
  ASSERT_EQ(a.size(), b.size());
  float scale = 0.0f, diff = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(b[i]));
    diff = std::max(diff, std::fabs(a[i] - b[i]));
  }
  EXPECT_LE(diff, tolerance * scale) << "max |diff| " << diff << " of max |logit| " << scale;
  EXPECT_EQ(std::max_element(a.begin(), a.end()) - a.begin(), std::max_element(b.begin(), b.end()) - b.begin());
}

}  // namespace squeeze::testing
