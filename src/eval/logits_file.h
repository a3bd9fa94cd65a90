// The saved output distribution of a base model on a text (`squeeze perplexity --save-logits`),
// read back by `--kl-divergence`. Format: docs/FORMATS.md, "Saved logits".
//
// Per scored position a row keeps the base model's argmax, the NLL of the correct next token
// (float) and the log-probabilities above kLogProbFloor on a fixed 16-bit grid, as a presence
// bitmap over the vocabulary plus one code per present token. Tokens at or below the floor are
// left out, as llama.cpp's KL divergence leaves them out.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::eval {

// Log-probabilities (natural log) at or below this are not stored.
inline constexpr double kLogProbFloor = -16.0;
// Codes per nat: code = round(-log p * kCodesPerNat), 0..65535 over (kLogProbFloor, 0].
inline constexpr double kCodesPerNat = 65535.0 / 16.0;

// One position of the base model, encoded.
struct LogitsRow {
  int32_t argmax = 0;             // most likely token (first on ties)
  float nll = 0.0f;               // -log p(correct next token)
  std::vector<uint8_t> present;   // [ceil(n_vocab / 8)] bit i: token i is stored
  std::vector<uint16_t> codes;    // [popcount(present)] in token order
};

// Quantizes a log-probability to its code; only for log_p > kLogProbFloor.
inline uint16_t logprob_code(double log_p) {
  const double c = -log_p * kCodesPerNat + 0.5;
  return c <= 0.0 ? 0 : (c >= 65535.0 ? 65535 : static_cast<uint16_t>(c));
}
inline double code_logprob(uint16_t code) { return -static_cast<double>(code) / kCodesPerNat; }

// Identity of a run: which text, tokenizer, vocabulary and chunking produced the rows.
struct LogitsHeader {
  uint32_t n_vocab = 0;
  uint64_t vocab_hash = 0;      // token texts (vocab_hash())
  uint64_t tokenizer_hash = 0;  // tokenizer model, pre-tokenizer, merges, BOS/EOS flags
  uint32_t n_ctx = 0;
  uint32_t n_chunks = 0;
  uint32_t first = 0;           // first position of a chunk with logits (n_ctx / 2)
  uint32_t n_scored = 0;        // rows per chunk (n_ctx - 1 - first)
  uint64_t n_text_tokens = 0;   // tokens of the whole text
  uint64_t tokens_hash = 0;     // token ids of the evaluated chunks (tokens_hash())
};

// 64-bit FNV-1a hashes used in the header.
uint64_t vocab_hash(const tokenizer::VocabData& v);
uint64_t tokenizer_hash(const tokenizer::VocabData& v);
uint64_t tokens_hash(std::span<const int32_t> tokens);

// Encodes one position's logits [n_vocab] whose correct next token is `target`.
void encode_row(const float* logits, int64_t n_vocab, int32_t target, LogitsRow& row);

// Writes through an AtomicFile (PATH.tmp.PID, renamed to PATH on commit()); a writer
// destroyed before commit() (error, Ctrl-C) removes the temporary file, so PATH is never
// half-written.
class LogitsWriter {
 public:
  LogitsWriter(std::string path, const LogitsHeader& header);

  // Chunks must come in order, each with header.n_scored rows.
  void write_chunk(uint32_t chunk, std::span<const LogitsRow> rows);
  // Checks that every chunk was written, flushes, and renames the file into place.
  void commit();
  const std::string& temp_path() const { return file_.tmp_path(); }

 private:
  AtomicFile file_;
  LogitsHeader header_;
  uint32_t next_chunk_ = 0;
  std::vector<uint8_t> buf_;
};

// Reads a saved-logits file; every read is checked (magic, version, sizes, per-chunk
// checksums), so a corrupt or truncated file is a FormatError naming the file.
class LogitsReader {
 public:
  explicit LogitsReader(std::string path);
  ~LogitsReader();
  LogitsReader(const LogitsReader&) = delete;
  LogitsReader& operator=(const LogitsReader&) = delete;

  const LogitsHeader& header() const { return header_; }
  // Throws UsageError if `run` (this model on this text) is not what the file was made from.
  void check_matches(const LogitsHeader& run) const;
  // Reads the next chunk (in order) into rows.
  void read_chunk(uint32_t chunk, std::vector<LogitsRow>& rows);

 private:
  void read_header();
  void get(void* data, size_t n, const char* what);
  std::string path_;
  LogitsHeader header_;
  std::FILE* f_ = nullptr;
  uint64_t file_size_ = 0;
  uint32_t next_chunk_ = 0;
  std::vector<uint8_t> buf_;
};

}  // namespace squeeze::eval
