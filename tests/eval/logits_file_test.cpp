// The saved-logits format: row encoding checked by hand, a write/read round trip, and every kind
// of bad file (wrong magic, corrupt byte, truncation, different text/vocab/ctx) as a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "eval/kld.h"
#include "eval/logits_file.h"
#include "temp_dir.h"

namespace squeeze::eval {
namespace {

namespace fs = std::filesystem;

TEST(LogitsRow, EncodingByHand) {
  // p = (1/2, 1/2, ~e^-100): two tokens at log p = -ln 2, the third below the floor.
  const float logits[3] = {0.0f, 0.0f, -100.0f};
  LogitsRow row;
  encode_row(logits, 3, /*target=*/1, row);
  EXPECT_EQ(row.argmax, 0);
  EXPECT_FLOAT_EQ(row.nll, static_cast<float>(std::log(2.0)));
  ASSERT_EQ(row.present.size(), 1u);
  EXPECT_EQ(row.present[0], 0b011);
  ASSERT_EQ(row.codes.size(), 2u);
  EXPECT_EQ(row.codes[0], 2839);  // round(ln 2 * 65535 / 16) = round(2839.13)
  EXPECT_EQ(row.codes[1], 2839);
  EXPECT_NEAR(code_logprob(row.codes[0]), -std::log(2.0), 0.5 / kCodesPerNat);
  EXPECT_EQ(logprob_code(0.0), 0);
  EXPECT_EQ(logprob_code(-15.9999), 65535);
}

TEST(LogitsRow, CompareRowByHand) {
  const float base_logits[2] = {0.0f, 0.0f};  // (1/2, 1/2)
  LogitsRow base;
  encode_row(base_logits, 2, 0, base);
  const float logits[2] = {std::log(3.0f), 0.0f};  // (3/4, 1/4)
  const KldRow r = compare_row(logits, 2, 0, base);
  // KL((1/2,1/2) || (3/4,1/4)) = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3)
  EXPECT_NEAR(r.kld, 0.5 * std::log(4.0 / 3.0), 2e-4);
  EXPECT_TRUE(r.same_top);
  EXPECT_NEAR(r.p_diff, 0.25, 1e-6);
  EXPECT_NEAR(r.nll, -std::log(0.75), 1e-6);
}

LogitsHeader header(uint32_t n_vocab, uint32_t n_ctx, uint32_t n_chunks) {
  LogitsHeader h;
  h.n_vocab = n_vocab;
  h.vocab_hash = 11;
  h.tokenizer_hash = 22;
  h.n_ctx = n_ctx;
  h.n_chunks = n_chunks;
  h.first = n_ctx / 2;
  h.n_scored = n_ctx - 1 - h.first;
  h.n_text_tokens = 1000;
  h.tokens_hash = 33;
  return h;
}

// A small valid file: n_vocab 13 (bitmap with padding bits), ctx 8 (3 rows), 2 chunks.
std::string write_sample(const std::string& name) {
  const std::string path = testing::temp_path(name);
  fs::remove(path);
  const LogitsHeader h = header(13, 8, 2);
  LogitsWriter w(path, h);
  std::vector<LogitsRow> rows(h.n_scored);
  for (uint32_t c = 0; c < 2; ++c) {
    for (uint32_t j = 0; j < h.n_scored; ++j) {
      float logits[13];
      for (int i = 0; i < 13; ++i) {
        logits[i] = static_cast<float>((i * 7 + j + c) % 13) - (i == 5 ? 40.0f : 0.0f);
      }
      encode_row(logits, 13, static_cast<int32_t>(j), rows[j]);
    }
    w.write_chunk(c, rows);
  }
  EXPECT_FALSE(fs::exists(path));  // only the temporary file until commit
  w.commit();
  return path;
}

std::vector<char> slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string dump(const std::string& name, const std::vector<char>& b) {
  const std::string p = testing::temp_path(name);
  std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
  return p;
}

void read_all(const std::string& path) {
  LogitsReader r(path);
  std::vector<LogitsRow> rows;
  for (uint32_t c = 0; c < r.header().n_chunks; ++c) r.read_chunk(c, rows);
}

TEST(LogitsFile, RoundTrip) {
  const std::string path = write_sample("squeeze_logits_rt.bin");
  LogitsReader r(path);
  EXPECT_EQ(r.header().n_vocab, 13u);
  EXPECT_EQ(r.header().tokens_hash, 33u);
  std::vector<LogitsRow> rows;
  r.read_chunk(0, rows);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].codes.size(), 12u);  // token 5 is 40 nats down: left out
  EXPECT_EQ(rows[0].present[0] & (1 << 5), 0);
  r.read_chunk(1, rows);
  EXPECT_NO_THROW(r.check_matches(header(13, 8, 2)));
}

TEST(LogitsFile, MismatchesAreClearErrors) {
  LogitsReader r(write_sample("squeeze_logits_mm.bin"));
  auto expect = [&](const LogitsHeader& run, const std::string& needle) {
    try {
      r.check_matches(run);
      FAIL() << "no error for " << needle;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  LogitsHeader h = header(13, 8, 2);
  h.n_vocab = 14;
  expect(h, "different vocabulary");
  h = header(13, 8, 2);
  h.vocab_hash = 12;
  expect(h, "different vocabulary");
  h = header(13, 8, 2);
  h.tokenizer_hash = 0;
  expect(h, "different tokenizer");
  h = header(16, 16, 2);
  h.n_vocab = 13;
  expect(h, "--ctx 8");
  h = header(13, 8, 2);
  h.tokens_hash = 34;
  expect(h, "different text");
}

TEST(LogitsFile, CorruptOrTruncatedFilesAreFormatErrors) {
  const std::vector<char> good = slurp(write_sample("squeeze_logits_good.bin"));
  ASSERT_GT(good.size(), 200u);
  auto expect = [](const std::string& path, const std::string& needle) {
    try {
      read_all(path);
      FAIL() << "no error for " << needle;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::vector<char> b = good;
  b[0] = 'X';
  expect(dump("squeeze_logits_magic.bin", b), "not a squeeze saved-logits file");
  b = good;
  b[20] ^= 1;  // inside the header
  expect(dump("squeeze_logits_hdr.bin", b), "header checksum");
  b = good;
  b[good.size() / 2] ^= 0x40;  // inside a chunk
  expect(dump("squeeze_logits_flip.bin", b), "corrupt");
  for (size_t cut : {size_t{10}, size_t{100}, good.size() / 2, good.size() - 3}) {
    const std::vector<char> part(good.begin(), good.begin() + static_cast<ptrdiff_t>(cut));
    expect(dump("squeeze_logits_cut.bin", part), "truncated");
  }
  EXPECT_THROW(LogitsReader("/nonexistent/x.logits"), Error);
}

}  // namespace
}  // namespace squeeze::eval
