// Streaming decode holds back incomplete UTF-8 until a later token completes it.
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "toy_vocab.h"

namespace squeeze::tokenizer {
namespace {

using testing::ToyVocab;

TEST(StreamDecoder, HoldsSplitMultiByteCharacters) {
  ToyVocab v;  // token id == byte value for ids 0..255
  Tokenizer tok(v.data);
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push('a'), "a");
  EXPECT_EQ(dec.push(0xC3), "");  // first byte of "é"
  EXPECT_EQ(dec.push(0xA9), "\xC3\xA9");
  // A 4-byte emoji (F0 9F 98 80) arriving one byte at a time.
  EXPECT_EQ(dec.push(0xF0), "");
  EXPECT_EQ(dec.push(0x9F), "");
  EXPECT_EQ(dec.push(0x98), "");
  EXPECT_EQ(dec.push(0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamDecoder, CompletesWithinOneTokenAndAcrossTokens) {
  ToyVocab v;
  const Token tail = v.add("\xC2\xA9" "b");  // byte-level text of the bytes A9 'b'
  Tokenizer tok(v.data);
  EXPECT_EQ(tok.token_to_piece(tail), "\xA9" "b");
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(0xC3), "");
  EXPECT_EQ(dec.push(tail), "\xC3\xA9" "b");
}

TEST(StreamDecoder, FlushReturnsAnIncompleteTail) {
  ToyVocab v;
  Tokenizer tok(v.data);
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push('x'), "x");
  EXPECT_EQ(dec.push(0xE2), "");
  EXPECT_EQ(dec.push(0x82), "");
  EXPECT_EQ(dec.flush(), "\xE2\x82");
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamDecoder, InvalidBytesAreNotHeldForever) {
  ToyVocab v;
  Tokenizer tok(v.data);
  StreamDecoder dec(tok);
  EXPECT_EQ(dec.push(0x80), "\x80");  // a stray continuation byte is passed on
  EXPECT_EQ(dec.push(0xFF), "\xFF");
}

TEST(StreamDecoder, ControlTokensOnRequest) {
  ToyVocab v;
  const Token end = v.add("<|im_end|>", TokenType::Control);
  Tokenizer tok(v.data);
  StreamDecoder plain(tok);
  EXPECT_EQ(plain.push(end), "");
  StreamDecoder rendered(tok, /*render_special=*/true);
  EXPECT_EQ(rendered.push(end), "<|im_end|>");
}

}  // namespace
}  // namespace squeeze::tokenizer
