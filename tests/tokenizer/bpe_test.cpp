// Byte-level BPE on hand-made vocabs: merge order, byte fallback, special tokens, flags, errors.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "toy_vocab.h"

namespace squeeze::tokenizer {
namespace {

using testing::bl;
using testing::ToyVocab;
using Ids = std::vector<Token>;

Token byte_id(char c) { return static_cast<uint8_t>(c); }

TEST(Bpe, WithoutMergesEveryByteIsItsOwnToken) {
  ToyVocab v;
  Tokenizer tok(v.data);
  EXPECT_EQ(tok.encode("ab", false, false), (Ids{'a', 'b'}));
  // "é" is the bytes C3 A9: two byte-level symbols, two tokens.
  EXPECT_EQ(tok.encode("\xC3\xA9", false, false), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(tok.encode("", false, false), Ids{});
}

TEST(Bpe, LowerRankMergesFirst) {
  ToyVocab v;
  const Token ab = v.add("ab"), bc = v.add("bc"), abc = v.add("abc");
  {
    ToyVocab w = v;
    w.merge("a", "b").merge("b", "c").merge("ab", "c");
    EXPECT_EQ(Tokenizer(w.data).encode("abc", false, false), (Ids{abc}));
  }
  {
    // "b c" outranks "a b", and there is no "a bc" merge: a + bc.
    ToyVocab w = v;
    w.merge("b", "c").merge("a", "b").merge("ab", "c");
    EXPECT_EQ(Tokenizer(w.data).encode("abc", false, false), (Ids{'a', bc}));
  }
  (void)ab;
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  ToyVocab v;
  const Token aa = v.add("aa");
  v.merge("a", "a");
  Tokenizer tok(v.data);
  EXPECT_EQ(tok.encode("aaa", false, false), (Ids{aa, 'a'}));
  EXPECT_EQ(tok.encode("aaaa", false, false), (Ids{aa, aa}));
}

TEST(Bpe, MergesStayInsideWords) {
  ToyVocab v;
  const Token sp_a = v.add(bl(" a")), ab = v.add("ab");
  v.merge(bl(" "), "a").merge("a", "b");
  Tokenizer tok(v.data);
  // GPT-2 words "ab" and " ab"; in the second, the space merge outranks "a b".
  EXPECT_EQ(tok.encode("ab ab", false, false), (Ids{ab, sp_a, 'b'}));
}

TEST(Bpe, MergedSymbolMissingFromVocabFallsBackToBytes) {
  ToyVocab v;
  v.merge("x", "y");  // "xy" is merged but is not a token
  Tokenizer tok(v.data);
  EXPECT_EQ(tok.encode("xy", false, false), (Ids{'x', 'y'}));
}

TEST(Bpe, MultiByteCharactersMergeLikeAnyOther) {
  ToyVocab v;
  const Token e_acute = v.add(bl("\xC3\xA9"));
  v.merge(bl("\xC3"), bl("\xA9"));
  Tokenizer tok(v.data);
  EXPECT_EQ(tok.encode("caf\xC3\xA9", false, false), (Ids{'c', 'a', 'f', e_acute}));
  EXPECT_EQ(tok.decode(tok.encode("caf\xC3\xA9", false, false)), "caf\xC3\xA9");
}

TEST(Bpe, InvalidUtf8IsReadAsReplacementCharacter) {
  ToyVocab v;
  Tokenizer tok(v.data);
  // A lone continuation byte becomes U+FFFD (EF BF BD), as in llama.cpp.
  EXPECT_EQ(tok.encode("a\x80", false, false), (Ids{'a', 0xEF, 0xBF, 0xBD}));
}

TEST(Bpe, SpecialTokensNeedParseSpecial) {
  ToyVocab v;
  const Token start = v.add("<|im_start|>", TokenType::Control);
  const Token end = v.add("<|im_end|>", TokenType::Control);
  Tokenizer tok(v.data);
  EXPECT_EQ(tok.encode("<|im_start|>hi<|im_end|>", false, true), (Ids{start, 'h', 'i', end}));
  const Ids plain = tok.encode("<|im_start|>hi<|im_end|>", false, false);
  EXPECT_EQ(plain.size(), std::string("<|im_start|>hi<|im_end|>").size());
  EXPECT_EQ(tok.decode(plain), "<|im_start|>hi<|im_end|>");
  // Control tokens render only on request.
  EXPECT_EQ(tok.decode({start, 'h', 'i', end}), "hi");
  EXPECT_EQ(tok.decode({start, 'h', 'i', end}, true), "<|im_start|>hi<|im_end|>");
}

TEST(Bpe, UserDefinedTokensAreAlwaysSplitOutAndRendered) {
  ToyVocab v;
  const Token user = v.add("<tool>", TokenType::UserDefined);
  Tokenizer tok(v.data);
  EXPECT_EQ(tok.encode("a<tool>b", false, false), (Ids{'a', user, 'b'}));
  EXPECT_EQ(tok.decode({'a', user, 'b'}), "a<tool>b");
}

TEST(Bpe, LongestSpecialTokenIsCutOutFirst) {
  ToyVocab v;
  const Token x = v.add("<x>", TokenType::Control);
  const Token xy = v.add("<x><y>", TokenType::Control);
  Tokenizer tok(v.data);
  EXPECT_EQ(tok.encode("<x><y><x>", false, true), (Ids{xy, x}));
  EXPECT_EQ(tok.encode(" <x> <x><y> ", false, true), (Ids{' ', x, ' ', xy, ' '}));
}

TEST(Bpe, AddSpecialFollowsVocabFlags) {
  ToyVocab v;
  v.data.bos = v.add("<s>", TokenType::Control);
  v.data.eos = v.add("</s>", TokenType::Control);
  {
    Tokenizer tok(v.data);
    EXPECT_EQ(tok.encode("a", true, false), (Ids{'a'}));
  }
  v.data.add_bos = true;
  v.data.add_eos = true;
  Tokenizer tok(v.data);
  EXPECT_EQ(tok.encode("a", true, false), (Ids{v.data.bos, 'a', v.data.eos}));
  EXPECT_EQ(tok.encode("a", false, false), (Ids{'a'}));
  EXPECT_EQ(tok.bos(), v.data.bos);
  EXPECT_EQ(tok.eos(), v.data.eos);
}

TEST(Bpe, EndOfGenerationTokens) {
  ToyVocab v;
  v.data.eos = v.add("</s>", TokenType::Control);
  const Token im_end = v.add("<|im_end|>", TokenType::Control);
  const Token eot = v.add("<|eot_id|>", TokenType::Normal);  // llama.cpp makes it a control token
  const Token other = v.add("<|im_start|>", TokenType::Control);
  Tokenizer tok(v.data);
  EXPECT_TRUE(tok.is_eog(v.data.eos));
  EXPECT_TRUE(tok.is_eog(im_end));
  EXPECT_TRUE(tok.is_eog(eot));
  EXPECT_FALSE(tok.is_eog(other));
  EXPECT_FALSE(tok.is_eog('a'));
  EXPECT_FALSE(tok.is_eog(-1));
  EXPECT_EQ(tok.token_to_piece(eot), "");
  EXPECT_EQ(tok.vocab().eot, im_end);  // first end-of-turn text in id order
}

TEST(Bpe, Llama3IgnoresMergesForWholeTokens) {
  ToyVocab v("llama-bpe");
  const Token abc = v.add("abc");  // reachable only as a whole word: no merges lead to it
  Tokenizer tok(v.data);
  EXPECT_EQ(tok.encode("abc", false, false), (Ids{abc}));
  ToyVocab g("gpt-2");
  g.add("abc");
  EXPECT_EQ(Tokenizer(g.data).encode("abc", false, false), (Ids{'a', 'b', 'c'}));
}

TEST(Bpe, TokenPieces) {
  ToyVocab v;
  const Token word = v.add(bl(" hello"));
  const Token byte = v.add("<0x41>", TokenType::Byte);
  const Token unused = v.add("zzz", TokenType::Unused);
  Tokenizer tok(v.data);
  EXPECT_EQ(tok.token_to_piece(word), " hello");
  EXPECT_EQ(tok.token_to_piece(byte), "A");
  EXPECT_EQ(tok.token_to_piece(unused), "");
  EXPECT_EQ(tok.token_to_piece(byte_id('\n')), "\n");
  EXPECT_THROW(tok.token_to_piece(tok.n_vocab()), Error);
  EXPECT_THROW(tok.token_to_piece(-1), Error);
}

TEST(Bpe, UnknownPreTokenizerIsAClearError) {
  ToyVocab v("no-such-pre");
  try {
    Tokenizer tok(v.data);
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-pre"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("smollm"), std::string::npos) << e.what();
  }
}

TEST(Bpe, UnknownModelAndBadVocabAreErrors) {
  ToyVocab v;
  v.data.model = "llama";
  EXPECT_THROW(Tokenizer{v.data}, FormatError);
  ToyVocab w;
  w.data.types.pop_back();
  EXPECT_THROW(Tokenizer{w.data}, FormatError);
  ToyVocab x;
  x.data.eos = 100000;
  EXPECT_THROW(Tokenizer{x.data}, FormatError);
  ToyVocab y;
  y.data.add_bos = true;  // but no BOS token
  EXPECT_THROW(Tokenizer(y.data).encode("a", true, false), FormatError);
}

}  // namespace
}  // namespace squeeze::tokenizer
