// llama.cpp's own tokenizer tests (its test-tokenizer-0): for each vocab family, every text of
// models/vocab/ggml-vocab-NAME.gguf.inp must give exactly the ids of the .out file (no BOS/EOS,
// special tokens not parsed). The files come from llama.cpp's tree (scripts/fetch_vocab_tests.sh caches them); a missing one is a
// skip, and a failure under CI=true.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "require_file.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::tokenizer {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// (text, ids) pairs, read as llama.cpp's test-tokenizer-0 reads them.
std::vector<std::pair<std::string, std::vector<Token>>> read_cases(const std::string& vocab) {
  const std::string inp = read_all(vocab + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(vocab + ".out");
  std::vector<std::pair<std::string, std::vector<Token>>> cases;
  std::string line;
  for (const std::string& text : texts) {
    if (!std::getline(out, line)) break;
    std::istringstream ids(line);
    std::vector<Token> want;
    for (Token t; ids >> t;) want.push_back(t);
    cases.emplace_back(text, std::move(want));
  }
  EXPECT_EQ(cases.size(), texts.size()) << vocab << ": .inp and .out differ in their counts";
  return cases;
}

class LlamaCppVocab : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaCppVocab, EveryTextGivesLlamaCppsIds) {
  const std::string vocab = squeeze::testing::model_file(std::string("vocab/ggml-vocab-") + GetParam() + ".gguf");
  SQUEEZE_REQUIRE_FILE(vocab);
  SQUEEZE_REQUIRE_FILE(vocab + ".out");
  const Tokenizer tok(read_vocab(gguf::File::open(vocab)));
  const auto cases = read_cases(vocab);
  ASSERT_GT(cases.size(), 10u);
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(tok.encode(text, false, false), want) << GetParam() << ": '" << text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LlamaCppVocab,
                         ::testing::Values("gpt-2", "llama-bpe", "llama-spm", "phi-3", "qwen2", "gemma-4"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace squeeze::tokenizer
