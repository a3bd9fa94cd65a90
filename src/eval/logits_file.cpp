#include "eval/logits_file.h"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "eval/log_softmax.h"

namespace squeeze::eval {

namespace {

constexpr char kMagic[8] = {'S', 'Q', 'L', 'O', 'G', 'I', 'T', 'S'};
constexpr char kEndMagic[8] = {'S', 'Q', 'L', 'G', 'T', 'E', 'N', 'D'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kChunkMagic = 0x4B4E4843;  // "CHNK"
constexpr size_t kHeaderBytes = 80;

struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  void str(const std::string& s) {
    const uint64_t n = s.size();
    bytes(&n, sizeof n);
    bytes(s.data(), s.size());
  }
  template <typename T>
  void pod(T v) { bytes(&v, sizeof v); }
};

template <typename T>
void put_pod(std::vector<uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof v);
}

template <typename T>
T get_pod(const uint8_t*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

// In 64 bits: n_vocab + 7 wraps in 32 (a corrupt n_vocab near 2^32 gave an empty bitmap).
size_t bitmap_bytes(uint32_t n_vocab) { return (size_t{n_vocab} + 7) / 8; }

std::vector<uint8_t> header_bytes(const LogitsHeader& h) {
  std::vector<uint8_t> b(kMagic, kMagic + 8);
  put_pod(b, kVersion);
  put_pod(b, h.n_vocab);
  put_pod(b, h.vocab_hash);
  put_pod(b, h.tokenizer_hash);
  put_pod(b, h.n_ctx);
  put_pod(b, h.n_chunks);
  put_pod(b, h.first);
  put_pod(b, h.n_scored);
  put_pod(b, h.n_text_tokens);
  put_pod(b, h.tokens_hash);
  put_pod(b, static_cast<float>(kLogProbFloor));
  put_pod(b, static_cast<float>(kCodesPerNat));
  Fnv f;
  f.bytes(b.data(), b.size());
  put_pod(b, f.h);
  return b;
}

std::string hex(uint64_t v) {
  char s[20];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}

}  // namespace

uint64_t vocab_hash(const tokenizer::VocabData& v) {
  Fnv f;
  for (const std::string& t : v.tokens) f.str(t);
  return f.h;
}

uint64_t tokenizer_hash(const tokenizer::VocabData& v) {
  Fnv f;
  f.str(v.model);
  f.str(v.pre);
  for (const std::string& m : v.merges) f.str(m);
  f.pod(v.bos);
  f.pod(v.eos);
  f.pod(static_cast<uint8_t>(v.add_bos));
  f.pod(static_cast<uint8_t>(v.add_eos));
  return f.h;
}

uint64_t tokens_hash(std::span<const int32_t> tokens) {
  Fnv f;
  f.bytes(tokens.data(), tokens.size_bytes());
  return f.h;
}

void encode_row(const float* logits, int64_t n_vocab, int32_t target, LogitsRow& row) {
  const RowSoftmax s = row_softmax(logits, n_vocab);
  row.argmax = s.argmax;
  row.nll = static_cast<float>(-s.log_prob(logits, target));
  row.present.assign((n_vocab + 7) / 8, 0);
  row.codes.clear();
  for (int64_t i = 0; i < n_vocab; ++i) {
    const double lp = s.log_prob(logits, i);
    if (lp > kLogProbFloor) {
      row.present[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
      row.codes.push_back(logprob_code(lp));
    }
  }
}

// --- writer ---

LogitsWriter::LogitsWriter(std::string path, const LogitsHeader& header)
    : file_(std::move(path)), header_(header) {
  const std::vector<uint8_t> h = header_bytes(header_);
  file_.write(h.data(), h.size());
}

void LogitsWriter::write_chunk(uint32_t chunk, std::span<const LogitsRow> rows) {
  if (chunk != next_chunk_ || chunk >= header_.n_chunks || rows.size() != header_.n_scored) {
    throw Error("internal: logits chunk " + std::to_string(chunk) + " written out of order");
  }
  const size_t nb = bitmap_bytes(header_.n_vocab);
  buf_.clear();
  for (const LogitsRow& r : rows) {
    put_pod(buf_, r.argmax);
    put_pod(buf_, r.nll);
    put_pod(buf_, static_cast<uint32_t>(r.codes.size()));
    buf_.insert(buf_.end(), r.present.begin(), r.present.begin() + static_cast<ptrdiff_t>(nb));
    const auto* c = reinterpret_cast<const uint8_t*>(r.codes.data());
    buf_.insert(buf_.end(), c, c + r.codes.size() * sizeof(uint16_t));
  }
  std::vector<uint8_t> head;
  put_pod(head, kChunkMagic);
  put_pod(head, chunk);
  put_pod(head, static_cast<uint64_t>(buf_.size()));
  Fnv f;
  f.bytes(buf_.data(), buf_.size());
  file_.write(head.data(), head.size());
  file_.write(buf_.data(), buf_.size());
  file_.write(&f.h, sizeof f.h);
  ++next_chunk_;
}

void LogitsWriter::commit() {
  if (next_chunk_ != header_.n_chunks) {
    throw Error("internal: " + std::to_string(next_chunk_) + " of " +
                std::to_string(header_.n_chunks) + " logits chunks written");
  }
  file_.write(kEndMagic, sizeof kEndMagic);
  file_.commit();
}

// --- reader ---

LogitsReader::LogitsReader(std::string path) : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), "rb");
  if (f_ == nullptr) throw Error("cannot open " + path_ + ": " + std::strerror(errno));
  // The destructor does not run when a constructor throws: a corrupt file must not leak the
  // FILE (and its descriptor).
  try {
    read_header();
  } catch (...) {
    std::fclose(f_);
    f_ = nullptr;
    throw;
  }
}

void LogitsReader::read_header() {
  if (std::fseek(f_, 0, SEEK_END) != 0 || std::ftell(f_) < 0) {
    throw Error("cannot read " + path_ + ": " + std::strerror(errno));
  }
  file_size_ = static_cast<uint64_t>(std::ftell(f_));
  std::rewind(f_);
  uint8_t b[kHeaderBytes];
  get(b, sizeof b, "header");
  if (std::memcmp(b, kMagic, 8) != 0) {
    throw FormatError(path_ + " is not a squeeze saved-logits file (bad magic)");
  }
  const uint8_t* p = b + 8;
  const auto version = get_pod<uint32_t>(p);
  if (version != kVersion) {
    throw FormatError(path_ + ": saved-logits version " + std::to_string(version) +
                      " is not supported (expected " + std::to_string(kVersion) + ")");
  }
  LogitsHeader& h = header_;
  h.n_vocab = get_pod<uint32_t>(p);
  h.vocab_hash = get_pod<uint64_t>(p);
  h.tokenizer_hash = get_pod<uint64_t>(p);
  h.n_ctx = get_pod<uint32_t>(p);
  h.n_chunks = get_pod<uint32_t>(p);
  h.first = get_pod<uint32_t>(p);
  h.n_scored = get_pod<uint32_t>(p);
  h.n_text_tokens = get_pod<uint64_t>(p);
  h.tokens_hash = get_pod<uint64_t>(p);
  const auto floor = get_pod<float>(p);
  const auto per_nat = get_pod<float>(p);
  const auto sum = get_pod<uint64_t>(p);
  Fnv f;
  f.bytes(b, kHeaderBytes - 8);
  if (f.h != sum) throw FormatError(path_ + ": header checksum mismatch (corrupt file)");
  if (floor != static_cast<float>(kLogProbFloor) || per_nat != static_cast<float>(kCodesPerNat)) {
    throw FormatError(path_ + ": unsupported log-probability grid");
  }
  if (h.n_vocab == 0 || h.n_ctx < 3 || h.n_chunks == 0 || h.first >= h.n_ctx ||
      h.n_scored != h.n_ctx - 1 - h.first) {
    throw FormatError(path_ + ": inconsistent header (n_vocab " + std::to_string(h.n_vocab) +
                      ", ctx " + std::to_string(h.n_ctx) + ", chunks " +
                      std::to_string(h.n_chunks) + ")");
  }
}

LogitsReader::~LogitsReader() {
  if (f_ != nullptr) std::fclose(f_);
}

void LogitsReader::get(void* data, size_t n, const char* what) {
  if (std::fread(data, 1, n, f_) != n) {
    throw FormatError(path_ + " is truncated or unreadable (reading " + what + ")");
  }
}

void LogitsReader::check_matches(const LogitsHeader& run) const {
  const LogitsHeader& s = header_;
  if (s.n_vocab != run.n_vocab || s.vocab_hash != run.vocab_hash) {
    throw UsageError(path_ + " was saved with a different vocabulary (" +
                     std::to_string(s.n_vocab) + " tokens, hash " + hex(s.vocab_hash) +
                     "; this model: " + std::to_string(run.n_vocab) + " tokens, hash " +
                     hex(run.vocab_hash) + ")");
  }
  if (s.tokenizer_hash != run.tokenizer_hash) {
    throw UsageError(path_ + " was saved with a different tokenizer (merges, pre-tokenizer or "
                     "BOS/EOS settings differ from this model's)");
  }
  if (s.n_ctx != run.n_ctx) {
    throw UsageError(path_ + " was saved with --ctx " + std::to_string(s.n_ctx) +
                     ", this run uses --ctx " + std::to_string(run.n_ctx));
  }
  if (s.n_text_tokens != run.n_text_tokens || s.tokens_hash != run.tokens_hash) {
    throw UsageError(path_ + " was saved from a different text (" +
                     std::to_string(s.n_text_tokens) + " tokens, hash " + hex(s.tokens_hash) +
                     "; this text: " + std::to_string(run.n_text_tokens) + " tokens, hash " +
                     hex(run.tokens_hash) + ")");
  }
}

void LogitsReader::read_chunk(uint32_t chunk, std::vector<LogitsRow>& rows) {
  if (chunk != next_chunk_ || chunk >= header_.n_chunks) {
    throw Error("internal: logits chunk " + std::to_string(chunk) + " read out of order");
  }
  const std::string what = "chunk " + std::to_string(chunk);
  uint8_t head[16];
  get(head, sizeof head, what.c_str());
  const uint8_t* p = head;
  const auto magic = get_pod<uint32_t>(p);
  const auto index = get_pod<uint32_t>(p);
  const auto n_bytes = get_pod<uint64_t>(p);
  const size_t nb = bitmap_bytes(header_.n_vocab);
  const size_t row_min = 12 + nb, row_max = row_min + 2 * size_t{header_.n_vocab};
  if (magic != kChunkMagic || index != chunk || n_bytes < row_min * header_.n_scored ||
      n_bytes > row_max * header_.n_scored) {
    throw FormatError(path_ + ": " + what + " has a bad record header (corrupt file)");
  }
  // The rows and their checksum must be in the file before n_bytes sizes the buffer (n_vocab
  // and n_scored from a corrupt header allow gigabytes).
  const long pos = std::ftell(f_);
  if (pos < 0 || n_bytes > file_size_ - static_cast<uint64_t>(pos) ||
      file_size_ - static_cast<uint64_t>(pos) - n_bytes < sizeof(uint64_t)) {
    throw FormatError(path_ + " is truncated (" + what + " claims " + std::to_string(n_bytes) +
                      " bytes)");
  }
  buf_.resize(n_bytes);
  get(buf_.data(), buf_.size(), what.c_str());
  uint64_t sum;
  get(&sum, sizeof sum, what.c_str());
  Fnv f;
  f.bytes(buf_.data(), buf_.size());
  if (f.h != sum) throw FormatError(path_ + ": " + what + " checksum mismatch (corrupt file)");

  rows.resize(header_.n_scored);
  p = buf_.data();
  const uint8_t* end = buf_.data() + buf_.size();
  for (LogitsRow& r : rows) {
    if (static_cast<size_t>(end - p) < row_min) {
      throw FormatError(path_ + ": " + what + " is short (corrupt file)");
    }
    r.argmax = get_pod<int32_t>(p);
    r.nll = get_pod<float>(p);
    const auto n_codes = get_pod<uint32_t>(p);
    r.present.assign(p, p + nb);
    p += nb;
    size_t bits = 0;
    for (uint8_t byte : r.present) bits += static_cast<size_t>(std::popcount(byte));
    const uint32_t tail_bits = header_.n_vocab % 8;
    const bool padding_set = tail_bits != 0 && (r.present.back() >> tail_bits) != 0;
    if (padding_set || r.argmax < 0 || static_cast<uint32_t>(r.argmax) >= header_.n_vocab ||
        bits != n_codes ||
        static_cast<size_t>(end - p) < 2 * size_t{n_codes}) {
      throw FormatError(path_ + ": " + what + " has an inconsistent row (corrupt file)");
    }
    r.codes.resize(n_codes);
    // (A row may store no code: memcpy must not see the empty vector's null data then.)
    if (n_codes != 0) std::memcpy(r.codes.data(), p, 2 * size_t{n_codes});
    p += 2 * size_t{n_codes};
  }
  if (p != end) throw FormatError(path_ + ": " + what + " has trailing bytes (corrupt file)");
  if (++next_chunk_ == header_.n_chunks) {
    char tail[8];
    get(tail, sizeof tail, "end marker");
    if (std::memcmp(tail, kEndMagic, 8) != 0) {
      throw FormatError(path_ + ": bad end marker (corrupt file)");
    }
  }
}

}  // namespace squeeze::eval
