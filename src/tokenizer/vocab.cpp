// VocabData from GGUF metadata (tokenizer.ggml.*), with llama.cpp's defaults.
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::tokenizer {
namespace {

std::vector<std::string> to_strings(const std::vector<std::string_view>& views) {
  return {views.begin(), views.end()};
}

TokenType to_token_type(int64_t v) {
  return v >= 0 && v <= static_cast<int64_t>(TokenType::Byte) ? static_cast<TokenType>(v)
                                                               : TokenType::Undefined;
}

}  // namespace

VocabData read_vocab(const gguf::File& file) {
  VocabData v;
  v.model = std::string(file.require_string("tokenizer.ggml.model"));
  v.pre = std::string(file.get_string("tokenizer.ggml.pre").value_or(""));
  v.tokens = to_strings(file.require_string_array("tokenizer.ggml.tokens"));
  const size_t n = v.tokens.size();

  const std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
  if (!types.empty()) {
    if (types.size() < n) {
      throw FormatError("tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                        " entries for " + std::to_string(n) + " tokens");
    }
    v.types.reserve(n);
    for (size_t i = 0; i < n; ++i) v.types.push_back(to_token_type(types[i]));
  }

  const bool spm = v.model == "llama";
  if (v.model == "gpt2") {
    v.merges = to_strings(file.require_string_array("tokenizer.ggml.merges"));
    // llama.cpp's defaults for a gpt2 vocab whose file names no BOS/EOS.
    if (n > 11) v.bos = v.eos = 11;
  } else if (spm) {
    v.scores = file.get_float_array("tokenizer.ggml.scores");
    if (v.scores.empty()) v.scores.assign(n, 0.0f);
    if (v.scores.size() < n) {
      throw FormatError("tokenizer.ggml.scores has " + std::to_string(v.scores.size()) +
                        " entries for " + std::to_string(n) + " tokens");
    }
    v.scores.resize(n);
    // llama.cpp's defaults for a SentencePiece vocab.
    if (n > 2) v.bos = 1, v.eos = 2, v.unk = 0;
    v.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  } else if (v.model == "gemma4") {
    // BPE over SentencePiece-style text (llama.cpp's gemma4 pre-tokenizer), BOS always added.
    v.merges = to_strings(file.require_string_array("tokenizer.ggml.merges"));
    v.pre = "gemma4";
  } else if (file.find("tokenizer.ggml.merges") != nullptr) {
    v.merges = to_strings(file.require_string_array("tokenizer.ggml.merges"));
  }

  // An id outside the vocab is ignored (llama.cpp warns and keeps the default).
  auto read_id = [&](std::string_view key, Token& id) {
    if (const auto value = file.get_int(key); value && *value >= 0 && *value < static_cast<int64_t>(n)) {
      id = static_cast<Token>(*value);
    }
  };
  read_id("tokenizer.ggml.bos_token_id", v.bos);
  read_id("tokenizer.ggml.eos_token_id", v.eos);
  read_id("tokenizer.ggml.eot_token_id", v.eot);
  read_id("tokenizer.ggml.unknown_token_id", v.unk);
  read_id("tokenizer.ggml.padding_token_id", v.pad);

  v.add_bos = file.get_bool("tokenizer.ggml.add_bos_token")
                  .value_or(spm || (v.model == "gpt2" && PreTokenizer::default_add_bos_for(v.pre)));
  if (v.model == "gemma4") v.add_bos = true;  // llama.cpp overrides the file for Gemma 4
  v.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.chat_template = std::string(file.get_string("tokenizer.chat_template").value_or(""));
  return v;
}

}  // namespace squeeze::tokenizer
