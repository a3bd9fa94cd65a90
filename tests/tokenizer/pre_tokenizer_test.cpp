// Pre-tokenizer splits, checked by hand against llama.cpp's regex lists and splitters.
#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace squeeze::tokenizer {
namespace {

using Words = std::vector<std::string>;

Words split(const PreTokenizer& pre, std::string_view text) {
  Words words;
  pre.split(text, words);
  return words;
}

TEST(PreTokenizer, SmolLmSplitsDigitsOneByOne) {
  PreTokenizer pre("smollm");
  EXPECT_EQ(split(pre, "12345"), (Words{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split(pre, "a 1"), (Words{"a", " ", "1"}));
  EXPECT_EQ(split(pre, "v1.2"), (Words{"v", "1", ".", "2"}));
  EXPECT_EQ(split(pre, "\xD9\xA1\xD9\xA2"), (Words{"\xD9\xA1", "\xD9\xA2"}));  // Arabic-Indic digits
}

TEST(PreTokenizer, Gpt2Words) {
  PreTokenizer pre("smollm");
  EXPECT_EQ(split(pre, "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(split(pre, "I'm don't"), (Words{"I", "'m", " don", "'t"}));
  EXPECT_EQ(split(pre, "IT'S"), (Words{"IT", "'", "S"}));  // contractions are lower-case only
  EXPECT_EQ(split(pre, "x+=y;"), (Words{"x", "+=", "y", ";"}));
  EXPECT_EQ(split(pre, " !?"), (Words{" !?"}));
  EXPECT_EQ(split(pre, ""), Words{});
}

TEST(PreTokenizer, Gpt2Whitespace) {
  PreTokenizer pre("gpt-2");
  // A run of spaces before a word leaves its last space to the word.
  EXPECT_EQ(split(pre, "a   b"), (Words{"a", "  ", " b"}));
  // At the end of the text the whole run is one word.
  EXPECT_EQ(split(pre, "end  "), (Words{"end", "  "}));
  EXPECT_EQ(split(pre, " "), (Words{" "}));
  EXPECT_EQ(split(pre, "a\n\nb"), (Words{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split(pre, "a \n b"), (Words{"a", " \n", " b"}));
  EXPECT_EQ(split(pre, "\tx"), (Words{"\t", "x"}));
  // llama.cpp's whitespace: U+0085 is, U+180E (Mongolian vowel separator) is not.
  EXPECT_EQ(split(pre, "a\xC2\x85\xC2\x85" "b"), (Words{"a", "\xC2\x85", "\xC2\x85", "b"}));
  EXPECT_EQ(split(pre, " \xE1\xA0\x8E"), (Words{" \xE1\xA0\x8E"}));
}

TEST(PreTokenizer, LettersAndNumbersNewerThanPcre2) {
  PreTokenizer pre("smollm");
  // Kawi letters (Unicode 15) form one word; Kawi digits are numbers, split one by one.
  EXPECT_EQ(split(pre, "\xF0\x91\xBC\x84\xF0\x91\xBC\x85"), (Words{"\xF0\x91\xBC\x84\xF0\x91\xBC\x85"}));
  EXPECT_EQ(split(pre, "\xF0\x91\xBD\x90\xF0\x91\xBD\x91"), (Words{"\xF0\x91\xBD\x90", "\xF0\x91\xBD\x91"}));
}

TEST(PreTokenizer, InvalidUtf8BecomesReplacementCharacters) {
  PreTokenizer pre("smollm");
  EXPECT_EQ(split(pre, "a\xFF" "b"), (Words{"a", "\xEF\xBF\xBD", "b"}));
  // A truncated sequence: each byte that cannot start a full sequence is one U+FFFD.
  EXPECT_EQ(split(pre, "\xE2\x82"), (Words{"\xEF\xBF\xBD\xEF\xBF\xBD"}));
  // An overlong "A" is read as "A", as llama.cpp's decoder does.
  EXPECT_EQ(split(pre, "\xC1\x81"), (Words{"A"}));
}

TEST(PreTokenizer, Llama3) {
  PreTokenizer pre("llama-bpe");
  EXPECT_TRUE(pre.ignore_merges());
  EXPECT_TRUE(pre.default_add_bos());
  EXPECT_EQ(split(pre, "12345"), (Words{"123", "45"}));
  EXPECT_EQ(split(pre, "IT'S"), (Words{"IT", "'S"}));
  EXPECT_EQ(split(pre, "Hello\n\nworld"), (Words{"Hello", "\n\n", "world"}));
  EXPECT_EQ(split(pre, "x!!\ny"), (Words{"x", "!!\n", "y"}));
  EXPECT_EQ(split(pre, "a  \n  b"), (Words{"a", "  \n", " ", " b"}));
  EXPECT_EQ(split(pre, "(hi)"), (Words{"(hi", ")"}));
}

TEST(PreTokenizer, Default) {
  PreTokenizer pre("default");
  EXPECT_EQ(split(pre, "a.b"), (Words{"a", ".", "b"}));
  EXPECT_EQ(split(pre, "12345"), (Words{"123", "45"}));
  EXPECT_FALSE(pre.ignore_merges());
}

TEST(PreTokenizer, LongRunsDoNotExhaustTheMatcher) {
  PreTokenizer pre("smollm");
  EXPECT_EQ(split(pre, std::string(1 << 20, ' ')).size(), 1u);
  EXPECT_EQ(split(pre, std::string(1 << 20, '!')).size(), 1u);
  EXPECT_EQ(split(pre, std::string(1 << 20, 'a')).size(), 1u);
  EXPECT_EQ(split(pre, std::string(1 << 16, '7')).size(), 1u << 16);
}

TEST(PreTokenizer, UnknownNameListsTheSupportedOnes) {
  try {
    PreTokenizer pre("tekken");
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tekken"), std::string::npos) << msg;
    EXPECT_NE(msg.find("smollm"), std::string::npos) << msg;
    EXPECT_NE(msg.find("llama-bpe"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace squeeze::tokenizer
