#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <stdexcept>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace squeeze::tokenizer {
namespace {

// llama.cpp classifies code points with its own tables (Unicode 15.1, unicode-data.cpp) and
// its own whitespace list; PCRE2 10.42 knows Unicode 14. The classes below make PCRE2 agree
// with llama.cpp on every code point (checked exhaustively against llama.cpp's tables).
//
// Whitespace: exactly llama.cpp's list (PCRE2's \s would add U+180E under PCRE2_UCP).
constexpr std::string_view kSpaceSet =
    R"(\t\n\x0B\f\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
// Letters, numbers and punctuation added after Unicode 14 (Kawi, Nag Mundari, Kaktovik numerals,
// CJK extension I, ...).
constexpr std::string_view kLetterExtra =
    R"(\x{1123F}-\x{11240}\x{11F02}\x{11F04}-\x{11F10}\x{11F12}-\x{11F33}\x{1342F}\x{13441}-\x{13446})"
    R"(\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D}\x{1E4D0}-\x{1E4EB}\x{2B739})"
    R"(\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
constexpr std::string_view kNumberExtra = R"(\x{11F50}-\x{11F59}\x{1D2C0}-\x{1D2D3}\x{1E4F0}-\x{1E4F9})";
constexpr std::string_view kPunctExtra = R"(\x{11B00}-\x{11B09}\x{11F43}-\x{11F4F})";

// Rewrites \s, \S, \p{L}, \p{N} and \p{P} in a llama.cpp regex into the classes above, inside
// or outside [...].
std::string widen_classes(std::string_view re) {
  std::string out;
  bool in_class = false;
  auto add_class = [&](std::string_view body) {
    if (in_class) {
      out += body;
    } else {
      out += '[';
      out += body;
      out += ']';
    }
  };
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
    } else if (c == ']' && in_class) {
      in_class = false;
      out += c;
    } else if (c != '\\' || i + 1 == re.size()) {
      out += c;
    } else if (re[i + 1] == 's') {
      add_class(kSpaceSet);
      ++i;
    } else if (re[i + 1] == 'S') {
      if (in_class) throw std::logic_error("\\S inside a class is not supported");
      out += "[^";
      out += kSpaceSet;
      out += ']';
      ++i;
    } else if (re.substr(i, 5) == "\\p{L}" || re.substr(i, 5) == "\\p{N}" ||
               re.substr(i, 5) == "\\p{P}") {
      const char cat = re[i + 3];
      std::string body(re.substr(i, 5));
      body += cat == 'L' ? kLetterExtra : cat == 'N' ? kNumberExtra : kPunctExtra;
      add_class(body);
      i += 4;
    } else {
      out += c;
      out += re[i + 1];
      ++i;
    }
  }
  return out;
}

// The regex lists of llama.cpp (llm_tokenizer_bpe), in its own spelling. kGpt2 has the final
// "|\s+" that llama.cpp's hand-written GPT-2 splitter applies (a regex without it leaves the
// same single whitespace as an unmatched piece, so the words are the same).
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreSpec {
  std::vector<std::string_view> names;
  std::vector<const char*> regexes;
  bool ignore_merges = false;
  bool add_bos = false;
};

const std::vector<PreSpec>& pre_specs() {
  static const std::vector<PreSpec> specs = {
      // Digits one by one, then GPT-2 words.
      {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {R"(\p{N})", kGpt2}},
      {{"gpt-2", "phi-2", "mpt", "olmo"}, {kGpt2}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral"}, {kLlama3}, true, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}},
      {{"qwen2", "deepseek-r1-qwen"}, {kQwen2}},
      {{"default", ""}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
  };
  return specs;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;

  explicit Regex(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                         PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> msg{};
      pcre2_get_error_message(err, msg.data(), msg.size());
      throw std::logic_error("pre-tokenizer regex does not compile at " +
                             std::to_string(err_offset) + ": " +
                             reinterpret_cast<const char*>(msg.data()));
    }
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Splits subject[off, off+len) into matches and the text between them; appends (offset, length).
  void split(std::string_view subject, size_t off, size_t len, pcre2_match_data* md,
             std::vector<std::pair<size_t, size_t>>& out) const {
    const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data() + off);
    size_t prev = 0, start = 0;
    while (start < len) {
      const int rc = jit ? pcre2_jit_match(code, s, len, start, 0, md, nullptr)
                         : pcre2_match(code, s, len, start, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        std::array<PCRE2_UCHAR, 256> msg{};
        pcre2_get_error_message(rc, msg.data(), msg.size());
        throw Error(std::string("pre-tokenizer: ") + reinterpret_cast<const char*>(msg.data()));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t m_begin = ov[0], m_end = ov[1];
      if (m_end == m_begin) {  // empty match: none of our regexes make one, but never loop
        start = m_end + utf8_seq_len(static_cast<uint8_t>(subject[off + m_end]));
        continue;
      }
      if (m_begin > prev) out.emplace_back(off + prev, m_begin - prev);
      out.emplace_back(off + m_begin, m_end - m_begin);
      prev = start = m_end;
    }
    if (prev < len) out.emplace_back(off + prev, len - prev);
  }
};

PreTokenizer::PreTokenizer(std::string_view pre) {
  for (const PreSpec& spec : pre_specs()) {
    for (std::string_view name : spec.names) {
      if (name != pre) continue;
      for (const char* re : spec.regexes) stages_.push_back(std::make_unique<Regex>(widen_classes(re)));
      ignore_merges_ = spec.ignore_merges;
      default_add_bos_ = spec.add_bos;
      return;
    }
  }
  throw FormatError("unsupported pre-tokenizer tokenizer.ggml.pre = '" + std::string(pre) +
                    "'; squeeze supports: " + supported_names());
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::string PreTokenizer::supported_names() {
  std::string names;
  for (const PreSpec& spec : pre_specs()) {
    for (std::string_view name : spec.names) {
      if (name.empty()) continue;
      if (!names.empty()) names += ", ";
      names += name;
    }
  }
  return names;
}

bool PreTokenizer::default_add_bos_for(std::string_view pre) {
  for (const PreSpec& spec : pre_specs()) {
    if (std::find(spec.names.begin(), spec.names.end(), pre) != spec.names.end()) return spec.add_bos;
  }
  return false;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& words) const {
  // llama.cpp decodes invalid UTF-8 leniently (bad bytes -> U+FFFD) and splits what it decoded.
  // `source` is that text; `subject` is the same with surrogates (which llama.cpp lets through
  // and PCRE2 refuses) shown to PCRE2 as U+FFFD, a code point of the same class and length.
  std::string source_buf, subject_buf;
  std::string_view source = text, subject = text;
  if (!is_valid_utf8(text)) {
    for (uint32_t cpt : decode_utf8_lenient(text)) append_utf8(source_buf, cpt);
    subject_buf = source_buf;
    for (size_t i = 0; i + 2 < subject_buf.size(); ++i) {
      const auto b0 = static_cast<uint8_t>(subject_buf[i]), b1 = static_cast<uint8_t>(subject_buf[i + 1]);
      if (b0 == 0xED && b1 >= 0xA0) {
        subject_buf.replace(i, 3, "\xEF\xBF\xBD");
      }
    }
    source = source_buf;
    subject = subject_buf;
  }

  std::vector<std::pair<size_t, size_t>> pieces{{0, subject.size()}}, next;
  if (subject.empty()) return;
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  if (md == nullptr) throw std::bad_alloc();
  try {
    for (const auto& stage : stages_) {
      next.clear();
      for (auto [off, len] : pieces) stage->split(subject, off, len, md, next);
      pieces.swap(next);
    }
  } catch (...) {
    pcre2_match_data_free(md);
    throw;
  }
  pcre2_match_data_free(md);
  for (auto [off, len] : pieces) words.emplace_back(source.substr(off, len));
}

}  // namespace squeeze::tokenizer
