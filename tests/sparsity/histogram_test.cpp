// The |x| histogram's quantiles against sorted data, and the threshold table's round trip
// through a GGUF file with its consistency checks.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <limits>
#include <random>

#include "core/error.h"
#include "sparsity/histogram.h"
#include "sparsity/thresholds.h"

namespace squeeze::sparsity {
namespace {

TEST(AbsHistogram, QuantilesMatchSortedData) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> x(200000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = n01(rng) * (i % 2 ? 0.05f : 3.0f);  // two scales
  x[7] = 0.0f;
  AbsHistogram h;
  h.add(x.data(), static_cast<int64_t>(x.size()));
  ASSERT_EQ(h.count(), x.size());
  std::vector<float> a(x.size());
  for (size_t i = 0; i < x.size(); ++i) a[i] = std::fabs(x[i]);
  std::sort(a.begin(), a.end());
  for (double q : {0.01, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 0.99}) {
    const float exact = a[static_cast<size_t>(q * static_cast<double>(a.size()))];
    const float t = h.quantile(q);
    EXPECT_NEAR(t, exact, 0.016 * exact) << q;  // within a bin (1/64 of an octave)
    // The fraction actually below t is q up to the values of one bin.
    const double below = static_cast<double>(std::lower_bound(a.begin(), a.end(), t) - a.begin()) /
                         static_cast<double>(a.size());
    EXPECT_NEAR(below, q, 0.005) << q;
    EXPECT_NEAR(h.fraction_below(t), q, 1e-6) << q;
  }
  EXPECT_EQ(h.quantile(0.0), 0.0f);
  EXPECT_GT(h.quantile(1.0), a.back());

  AbsHistogram g;
  g.add(x.data(), 1000);
  g.merge(h);
  EXPECT_EQ(g.count(), x.size() + 1000);
  const float nan = std::nanf(""), inf = INFINITY;
  AbsHistogram k;
  k.add(&nan, 1);
  k.add(&inf, 1);
  const float one = 1.0f;
  k.add(&one, 1);
  EXPECT_GE(k.quantile(0.3), 1.0f);  // within the bin of 1
  EXPECT_LT(k.quantile(0.3), 1.0f + 1.0f / 64);
  // Non-finite values rank above every threshold: the quantile is the largest float.
  EXPECT_EQ(k.quantile(0.9), std::numeric_limits<float>::max());
}

ThresholdTable small_table() {
  ThresholdTable t;
  t.method = Method::Teal;
  t.n_layer = 2;
  t.levels = {0.0f, 0.25f, 0.5f};
  t.default_level = 0.25f;
  for (int i = 0; i < 2 * kTealSites * 3; ++i) t.thresholds.push_back(0.01f * static_cast<float>(i));
  return t;
}

gguf::File file_of(const gguf::Writer& w) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("squeeze_thresholds_" + std::to_string(::getpid()) + ".gguf");
  w.write(path.string());
  gguf::File f = gguf::File::open(path.string());
  std::filesystem::remove(path);  // the mapping stays valid
  return f;
}

TEST(ThresholdTable, RoundTripsThroughGguf) {
  const ThresholdTable t = small_table();
  gguf::Writer w;
  t.write(w);
  const gguf::File f = file_of(w);
  const auto r = ThresholdTable::read(f);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->method, Method::Teal);
  EXPECT_EQ(r->n_layer, 2);
  EXPECT_EQ(r->levels, t.levels);
  EXPECT_EQ(r->thresholds, t.thresholds);
  EXPECT_EQ(r->default_level, 0.25f);
  EXPECT_EQ(r->at(1, kFfnAct, 2), t.thresholds.back());
  EXPECT_EQ(r->level_index(0.5), 2u);
  EXPECT_THROW(r->level_index(0.3), UsageError);
  EXPECT_TRUE(r->head.empty());  // optional

  ThresholdTable with_head = small_table();
  with_head.head = {0.0f, 0.25f, 0.5f};
  gguf::Writer wh;
  with_head.write(wh);
  const auto rh = ThresholdTable::read(file_of(wh));
  ASSERT_TRUE(rh.has_value());
  EXPECT_EQ(rh->head, with_head.head);

  gguf::Writer none;
  none.add_string("general.architecture", "llama");
  EXPECT_FALSE(ThresholdTable::read(file_of(none)).has_value());
  EXPECT_THROW(parse_method("relu6"), UsageError);
}

TEST(ThresholdTable, InconsistentTablesAreFormatErrors) {
  auto broken = [](auto&& edit) {
    ThresholdTable t = small_table();
    edit(t);
    gguf::Writer w;
    t.write(w);
    return file_of(w);
  };
  EXPECT_THROW(ThresholdTable::read(broken([](ThresholdTable& t) { t.thresholds.pop_back(); })),
               FormatError);
  EXPECT_THROW(ThresholdTable::read(broken([](ThresholdTable& t) { t.levels = {0.5f, 0.25f, 0.1f}; })),
               FormatError);
  EXPECT_THROW(ThresholdTable::read(broken([](ThresholdTable& t) { t.thresholds[3] = -1.0f; })),
               FormatError);
  EXPECT_THROW(ThresholdTable::read(broken([](ThresholdTable& t) { t.thresholds[3] = NAN; })),
               FormatError);
  EXPECT_THROW(ThresholdTable::read(broken([](ThresholdTable& t) { t.method = Method::Cats; })),
               FormatError);  // CATS has one site: the sizes no longer fit
  auto with_head = [&](std::vector<float> head, Method method) {
    return broken([&](ThresholdTable& t) {
      t.head = head;
      if (method == Method::Cats) {
        t.method = method;
        t.thresholds.resize(static_cast<size_t>(t.n_layer) * t.levels.size());
      }
    });
  };
  EXPECT_NO_THROW(ThresholdTable::read(with_head({0.0f, 0.1f, 0.2f}, Method::Teal)));
  EXPECT_THROW(ThresholdTable::read(with_head({0.0f, 0.1f}, Method::Teal)), FormatError);
  EXPECT_THROW(ThresholdTable::read(with_head({0.0f, -0.1f, 0.2f}, Method::Teal)), FormatError);
  EXPECT_THROW(ThresholdTable::read(with_head({0.0f, INFINITY, 0.2f}, Method::Teal)), FormatError);
  EXPECT_THROW(ThresholdTable::read(with_head({0.0f, 0.1f, 0.2f}, Method::Cats)), FormatError);
}

}  // namespace
}  // namespace squeeze::sparsity
