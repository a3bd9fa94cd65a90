// --prefill-skip's layer sets and the stored POP plan: ranges, auto:R from the calibrated
// order, the text form, the metadata round trip, and clear errors for bad input.
#include <gtest/gtest.h>

#include "core/error.h"
#include "sparsity/prefill_plan.h"

namespace squeeze::sparsity {
namespace {

std::vector<uint8_t> flags(int64_t n, std::initializer_list<int> on) {
  std::vector<uint8_t> s(static_cast<size_t>(n), 0);
  for (const int i : on) s[static_cast<size_t>(i)] = 1;
  return s;
}

TEST(PrefillPlan, RangesAndLists) {
  const PrefillPlan none;
  EXPECT_EQ(parse_prefill_skip("2-4,7", 8, none), flags(8, {2, 3, 4, 7}));
  EXPECT_EQ(parse_prefill_skip("0", 8, none), flags(8, {0}));
  EXPECT_EQ(parse_prefill_skip("5-7,6", 8, none), flags(8, {5, 6, 7}));
  EXPECT_TRUE(parse_prefill_skip("none", 8, none).empty());
  EXPECT_TRUE(parse_prefill_skip("", 8, none).empty());
  EXPECT_EQ(prefill_skip_text(flags(8, {2, 3, 4, 7})), "2-4,7");
  EXPECT_EQ(prefill_skip_text(flags(8, {0, 7})), "0,7");
  EXPECT_EQ(prefill_skip_text(flags(8, {})), "none");
}

TEST(PrefillPlan, AutoTakesTheFirstOfTheOrder) {
  PrefillPlan p;
  p.score = "kld";
  p.order = {7, 5, 6, 0, 1, 2, 3, 4};
  p.scores.assign(8, 0.0f);
  EXPECT_EQ(parse_prefill_skip("auto:0.25", 8, p), flags(8, {7, 5}));
  EXPECT_EQ(parse_prefill_skip("auto:0.375", 8, p), flags(8, {7, 5, 6}));
  EXPECT_EQ(parse_prefill_skip("auto:0", 8, p), flags(8, {}));
  EXPECT_EQ(parse_prefill_skip("auto:1", 8, p), flags(8, {0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(PrefillPlan, BadSetsAreUsageErrors) {
  PrefillPlan p;
  for (const char* bad : {"8", "3-2", "-1", "a", "1,,2", "1-", "2-9", "1.5", "auto:1.5",
                          "auto:-0.1", "auto:x", "auto:"}) {
    EXPECT_THROW(parse_prefill_skip(bad, 8, p), UsageError) << bad;
  }
  try {
    parse_prefill_skip("auto:0.5", 8, p);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("prune-prefill"), std::string::npos) << e.what();
  }
}

TEST(PrefillPlan, MetadataRoundTrip) {
  PrefillPlan p;
  p.score = "bi";
  p.order = {3, 1, 2, 0};
  p.scores = {0.4f, 0.2f, 0.3f, 0.1f};
  p.calib_file = "valid.txt";
  p.calib_chunks = 4;
  p.calib_ctx = 512;
  gguf::Writer w;
  w.add_string("general.architecture", "llama");
  p.write(w);
  const auto f = gguf::File::from_bytes("plan", w.to_bytes());
  const PrefillPlan q = PrefillPlan::read(f, 4);
  EXPECT_EQ(q.score, "bi");
  EXPECT_EQ(q.order, p.order);
  EXPECT_EQ(q.scores, p.scores);
  EXPECT_EQ(q.calib_file, "valid.txt");
  EXPECT_EQ(q.calib_chunks, 4);
  EXPECT_EQ(q.calib_ctx, 512);
  EXPECT_TRUE(PrefillPlan::is_key("squeeze.pop.layer_order"));
  EXPECT_FALSE(PrefillPlan::is_key("squeeze.sparsity.levels"));
  EXPECT_THROW(PrefillPlan::read(f, 5), FormatError);  // another layer count

  gguf::Writer dup;
  p.order = {3, 3, 2, 0};
  p.write(dup);
  EXPECT_THROW(PrefillPlan::read(gguf::File::from_bytes("dup", dup.to_bytes()), 4), FormatError);
  gguf::Writer empty;
  empty.add_string("general.architecture", "llama");
  EXPECT_TRUE(PrefillPlan::read(gguf::File::from_bytes("none", empty.to_bytes()), 4).order.empty());
}

TEST(PrefillPlan, HeadRankingRoundTrip) {
  HeadRanking r;
  r.score = "vnorm";
  r.scores = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  r.calib_file = "valid.txt";
  r.calib_chunks = 2;
  r.calib_ctx = 256;
  gguf::Writer w;
  r.write(w);
  const auto f = gguf::File::from_bytes("heads", w.to_bytes());
  const HeadRanking q = HeadRanking::read(f, 2, 3);
  EXPECT_EQ(q.score, "vnorm");
  EXPECT_EQ(q.scores, r.scores);
  EXPECT_EQ(q.calib_ctx, 256);
  EXPECT_THROW(HeadRanking::read(f, 3, 3), FormatError);
  EXPECT_TRUE(HeadRanking::is_key("squeeze.heads.scores"));
  EXPECT_FALSE(HeadRanking::is_key("squeeze.pop.score"));
  gguf::Writer empty;
  empty.add_string("general.architecture", "llama");
  EXPECT_TRUE(HeadRanking::read(gguf::File::from_bytes("none", empty.to_bytes()), 2, 3).scores.empty());
}

}  // namespace
}  // namespace squeeze::sparsity
