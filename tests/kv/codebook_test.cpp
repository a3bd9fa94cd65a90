// KV codebooks (kv/codebook.h): codes take their nearest level and come back as it; the fit
// lowers the squared error of real quantization on gaussian groups; a cache with a codebook, or
// observing one's fit, uses and feeds it; the model-file keys round trip and bad ones are
// errors.
#include "kv/codebook.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "random.h"

namespace squeeze::kv {
namespace {

// Levels of 2 bits off the grid.
constexpr float kLevels2[4] = {0.2f, 1.1f, 1.7f, 2.9f};

TEST(KvCodebook, CodesTakeTheNearestLevelAndComeBackAsIt) {
  const std::vector<float> x = testing::randn(128, 5, 3.0f);
  for (const int bits : {2, 4}) {
    std::vector<float> levels(16);
    for (int c = 0; c < (1 << bits); ++c) levels[c] = bits == 2 ? kLevels2[c] : c + 0.35f * std::sin(1.0f + c);
    std::vector<uint8_t> codes(packed_bytes(128, bits));
    std::vector<QuantParams> p(4);
    quantize_row_groups(x.data(), 128, 32, bits, codes.data(), p.data(), levels.data());
    std::vector<f16_t> back(128);
    dequantize_row(codes.data(), p.data(), 128, 32, bits, back.data(), levels.data());
    for (int i = 0; i < 128; ++i) {
      const float mn = f16_to_f32(p[i / 32].min), sc = f16_to_f32(p[i / 32].scale);
      const float t = (x[i] - mn) / sc;
      const uint32_t code = code_at(codes.data(), i, bits);
      for (int c = 0; c < (1 << bits); ++c) {  // no level nearer than the code's
        EXPECT_LE(std::abs(t - levels[code]), std::abs(t - levels[c]) + 1e-4f) << bits << " " << i;
      }
      EXPECT_NEAR(f16_to_f32(back[i]), mn + levels[code] * sc, 2e-3f * (1 + std::abs(x[i])));
    }
    // The identity levels are the uniform codes, bit for bit.
    std::vector<float> grid(16);
    for (int c = 0; c < 16; ++c) grid[c] = static_cast<float>(c);
    std::vector<uint8_t> a(codes.size()), b(codes.size());
    std::vector<QuantParams> pa(4), pb(4);
    quantize_row_groups(x.data(), 128, 32, bits, a.data(), pa.data());
    quantize_row_groups(x.data(), 128, 32, bits, b.data(), pb.data(), grid.data());
    EXPECT_EQ(a, b);
  }
}

// Mean squared error of quantizing x[rows, width] per column with levels (nullptr: uniform).
double column_error(const std::vector<float>& x, int64_t rows, int64_t width, int bits, const float* levels) {
  std::vector<uint8_t> codes(packed_bytes(rows, bits) * width);
  std::vector<QuantParams> p(static_cast<size_t>(width));
  quantize_columns(x.data(), rows, width, bits, codes.data(), p.data(), levels);
  std::vector<f16_t> row(static_cast<size_t>(width));
  double e = 0;
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_column_row(codes.data(), p.data(), rows, width, bits, r, row.data(), levels);
    for (int64_t c = 0; c < width; ++c) e += std::pow(f16_to_f32(row[c]) - x[r * width + c], 2);
  }
  return e / static_cast<double>(rows * width);
}

TEST(KvCodebook, TheFitLowersTheErrorOfGaussianGroups) {
  for (const int bits : {2, 4}) {
    CodebookFit fit(1, bits);
    for (uint32_t seed = 0; seed < 20; ++seed) {  // keys by column (blocks of 32), values by row
      const std::vector<float> k = testing::randn(32 * 64, seed), v = testing::randn(32 * 64, seed + 100);
      fit.observe(0, 0, k.data(), 32, 64, 32, true);
      fit.observe(0, 1, v.data(), 32, 64, 32, false);
    }
    EXPECT_EQ(fit.observed(), 20 * 2 * 32 * 64);
    const KvCodebook cb = fit.fit();
    const int top = (1 << bits) - 1;
    for (int kv = 0; kv < 2; ++kv) {
      for (int c = 0; c <= top; ++c) {
        EXPECT_GE(cb.at(0, kv)[c], 0.0f);
        EXPECT_LE(cb.at(0, kv)[c], static_cast<float>(top));
        if (c > 0) {
          EXPECT_GT(cb.at(0, kv)[c], cb.at(0, kv)[c - 1]);
        }
      }
    }
    // Gaussian groups are dense in the middle: the inner levels move in.
    EXPECT_GT(cb.at(0, 0)[1], 1.0f);
    EXPECT_LT(cb.at(0, 0)[top - 1], static_cast<float>(top - 1));
    EXPECT_LT(fit.error(cb), 0.9 * fit.error(fit.uniform())) << bits;
    // On fresh data, quantizing with the levels errs less than the uniform grid.
    const std::vector<float> x = testing::randn(32 * 64, 777);
    EXPECT_LT(column_error(x, 32, 64, bits, cb.at(0, 0)), 0.9 * column_error(x, 32, 64, bits, nullptr)) << bits;
  }
}

TEST(KvCodebook, ModelFileKeysRoundTripAndBadOnesAreErrors) {
  KvCodebook cb;
  cb.bits = 2;
  cb.n_layer = 2;
  for (int i = 0; i < 4; ++i) cb.levels.insert(cb.levels.end(), kLevels2, kLevels2 + 4);
  cb.options = "q2 (...)";
  cb.calib = "wiki.valid.raw";
  auto file = [](const std::function<void(gguf::Writer&)>& add) {
    gguf::Writer w;
    w.add_string("general.architecture", "llama");
    add(w);
    const std::vector<uint8_t> bytes = w.to_bytes();
    return gguf::File::from_bytes("codebook", bytes);
  };
  const gguf::File f = file([&](gguf::Writer& w) { cb.write(w); });
  const std::optional<KvCodebook> back = KvCodebook::read(f, KvType::Q2);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->levels, cb.levels);
  EXPECT_EQ(back->n_layer, 2);
  EXPECT_EQ(back->calib, cb.calib);
  EXPECT_FALSE(KvCodebook::read(f, KvType::Q4).has_value());
  EXPECT_THROW(KvCodebook::require(f, KvType::Q4), UsageError);
  KvCodebook bad = cb;
  bad.levels.pop_back();
  EXPECT_THROW(KvCodebook::read(file([&](gguf::Writer& w) { bad.write(w); }), KvType::Q2), FormatError);
  bad = cb;
  std::swap(bad.levels[1], bad.levels[2]);  // out of order
  EXPECT_THROW(KvCodebook::read(file([&](gguf::Writer& w) { bad.write(w); }), KvType::Q2), FormatError);
  bad = cb;
  bad.n_layer = int64_t{1} << 61;  // a count whose levels would overflow
  EXPECT_THROW(KvCodebook::read(file([&](gguf::Writer& w) { bad.write(w); }), KvType::Q2), FormatError);
  bad = cb;
  bad.levels[3] = 3.5f;  // past the top code
  EXPECT_THROW(KvCodebook::read(file([&](gguf::Writer& w) { bad.write(w); }), KvType::Q2), FormatError);
}

TEST(KvCacheQuantized, ACodebookIsObservedFittedAndUsed) {
  KvOptions o{KvType::Q2, KeyAxis::Channel, 16, 0, 0};
  EXPECT_EQ(describe(KvOptions{KvType::Q2, KeyAxis::Channel, 16, 0, 0, 0, false, true}),
            "q2 (keys per channel, values per token, group 16, recent 0, sinks 0, codebook)");
  EXPECT_THROW(check_kv_options(KvOptions{KvType::Q8, KeyAxis::Channel, 16, 0, 0, 0, false, true}, 64), UsageError);
  // A cache observed by a fit: every frozen value is seen.
  CodebookFit fit(1, 2);
  auto fill = [](KvCache& c, int64_t n) {
    ASSERT_TRUE(c.prepare(0, n));
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<float> k = testing::randn(64, static_cast<uint32_t>(i)), v = testing::randn(64, static_cast<uint32_t>(i + 500));
      c.store(0, c.cell(0, i), k.data(), v.data());
    }
    c.commit(0, std::vector<int32_t>(static_cast<size_t>(n), 1));
  };
  {
    KvCache c(1, 64, 64, 1, o);
    c.set_codebook_fit(&fit);
    fill(c, 64);
  }
  EXPECT_EQ(fit.observed(), 2 * 64 * 64);
  // A cache with the codebook: codes read back as its levels, nearer the rows than uniform codes.
  o.codebook = true;
  KvCache c(1, 64, 64, 1, o);
  EXPECT_THROW(fill(c, 64), Error);  // no levels set
  KvCache bad(2, 64, 64, 1, o);
  EXPECT_THROW(bad.set_codebook(fit.fit()), UsageError);  // one layer for two
  KvCache with(1, 64, 64, 1, o), without(1, 64, 64, 1, KvOptions{KvType::Q2, KeyAxis::Channel, 16, 0, 0});
  with.set_codebook(fit.fit());
  fill(with, 64);
  fill(without, 64);
  ThreadPool pool(1);
  std::vector<int32_t> cells;
  with.cells(0, 64, cells);
  KvRows rw, ru;
  const ops::KvView a = with.read(0, cells, rw, pool), b = without.read(0, cells, ru, pool);
  double ea = 0, eb = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const std::vector<float> k = testing::randn(64, static_cast<uint32_t>(i));
    for (int64_t j = 0; j < 64; ++j) {
      ea += std::pow(f16_to_f32(rw.k[i * 64 + j]) - k[j], 2);
      eb += std::pow(f16_to_f32(ru.k[i * 64 + j]) - k[j], 2);
    }
  }
  (void)a;
  (void)b;
  EXPECT_LT(ea, 0.95 * eb);
}

}  // namespace
}  // namespace squeeze::kv
