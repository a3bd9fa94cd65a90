// A tiny random-weight GGUF model of the llama family (llama, qwen2 with q/k/v biases, qwen3
// with QK-norm), written with gguf::Writer, for fast tests that need a whole model (forward
// pass, CLI, bad-input variants) without the real one, and for the architectures' reference
// tests against llama.cpp (tests/util/write_tiny_model.cpp writes the same files for
// tools/make_arch_fixture.py).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/format.h"
#include "gguf/gguf.h"

namespace squeeze::testing {

struct TinyModelSpec {
  std::string arch = "llama";  // general.architecture and the prefix of the hyperparameter keys
  int64_t n_embd = 64;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t n_ff = 128;
  int64_t n_layer = 2;
  int64_t n_ctx_train = 128;
  int64_t head_dim = 0;   // > 0: attention.key_length/value_length (else n_embd / n_head)
  bool qkv_bias = false;  // blk.N.attn_{q,k,v}.bias (qwen2)
  bool qk_norm = false;   // blk.N.attn_{q,k}_norm.weight (qwen3)
  bool rope_freqs = false;  // rope_freqs.weight, divisors of the rotary frequencies (Llama 3.1)
  // > 0: a routed MLP (qwen3moe) of n_expert experts of n_ff wide, n_expert_used per token, in
  // place of the dense MLP.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  // A SentencePiece vocabulary (tokenizer.ggml.model "llama": Llama 2, Mistral, TinyLlama) of
  // <unk> <s> </s>, 256 byte tokens and a few scored pieces, BOS added; else the GPT-2 one.
  bool spm_vocab = false;
  formats::DType matrix_type = formats::DType::Q8_0;
  bool tied_output = true;
  // > 0: unused tokens are added before the control tokens until the vocabulary holds a multiple
  // of this many (a head whose rows are a multiple of 32 has a column layout).
  int64_t vocab_multiple = 0;
  uint64_t seed = 1;
  // Lets a test drop or change metadata keys and tensors before writing.
  std::function<void(gguf::Writer&)> extra;
  std::vector<std::string> skip_keys;     // metadata keys not written
  std::vector<std::string> skip_tensors;  // tensors not written
};

// The GPT-2 byte-level alphabet: byte b -> the UTF-8 text of its stand-in code point.
std::string byte_to_token_text(uint8_t b);

// Token texts of the tiny vocabulary: 256 byte tokens, a few merges' results, then the
// control tokens <|endoftext|> <|im_start|> <|im_end|>.
std::vector<std::string> tiny_vocab(int64_t multiple = 0);

// Token texts of the SentencePiece variant (TinyModelSpec::spm_vocab).
std::vector<std::string> tiny_spm_vocab();

gguf::Writer tiny_model_writer(const TinyModelSpec& spec = {});
// Writes the model to `path`.
void write_tiny_model(const std::string& path, const TinyModelSpec& spec = {});

// The spec of the tiny model of the reference test `name`: llama, llama-rope-freqs (Llama 3.1's
// rope_freqs), llama-spm (a SentencePiece vocabulary), qwen2 (q/k/v biases), qwen3 (QK-norm, head_dim other than n_embd / n_head as in
// Qwen3-0.6B), qwen3moe (qwen3's attention, 8 experts, 2 per token); throws std::invalid_argument for another name.
TinyModelSpec tiny_arch_spec(const std::string& name);

}  // namespace squeeze::testing
