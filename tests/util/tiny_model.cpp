#include "tiny_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>

namespace squeeze::testing {

std::string byte_to_token_text(uint8_t b) {
  // Printable bytes stand for themselves; the others map to code points 256, 257, ...
  auto printable = [](int c) { return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174; };
  int cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c) n += printable(c) ? 0 : 1;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

static const std::vector<std::string>& tiny_merges() {
  static const std::vector<std::string> m = {"h e", "l l", "he ll", "Ġ t", "Ġt he", "o r"};
  return m;
}

std::vector<std::string> tiny_vocab(int64_t multiple) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(byte_to_token_text(static_cast<uint8_t>(b)));
  for (const std::string& m : tiny_merges()) {
    std::string merged = m;
    merged.erase(std::remove(merged.begin(), merged.end(), ' '), merged.end());
    v.push_back(merged);
  }
  while (multiple > 0 && (v.size() + 3) % static_cast<size_t>(multiple) != 0) {
    v.push_back("<unused" + std::to_string(v.size()) + ">");
  }
  v.push_back("<|endoftext|>");
  v.push_back("<|im_start|>");
  v.push_back("<|im_end|>");
  return v;
}

std::vector<std::string> tiny_spm_vocab() {
  std::vector<std::string> v = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.push_back(buf);
  }
  // Pieces in merge order; "_" stands for U+2581, SentencePiece's word boundary.
  for (std::string piece : {"_", "_t", "he", "_the", "in", "er", "_a", "on", "or", "_o", "at",
                            "an", "_of", "is", "_s", "e", "a", "t", "o", "n", "_T", "_The", "it",
                            "al", "ce", "ll", "_F", "ra", "_c", "ap", "_cap"}) {
    if (piece[0] == '_') piece.replace(0, 1, "\u2581");
    v.push_back(piece);
  }
  return v;
}

namespace {

std::vector<uint8_t> random_matrix(formats::DType type, int64_t n_cols, int64_t n_rows,
                                   float scale, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> row(n_cols);
  const size_t rb = formats::row_bytes(type, n_cols);
  std::vector<uint8_t> out(rb * n_rows);
  const auto& k = formats::kernels(type, Isa::Scalar);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (float& x : row) x = dist(rng);
    k.quantize_row(row.data(), out.data() + r * rb, n_cols);
  }
  return out;
}

std::vector<uint8_t> norm_vector(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(0.8f, 1.2f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  std::vector<uint8_t> out(n * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace

// The GPT-2 style tokenizer keys of tiny_vocab (bos = eos = <|endoftext|>, no BOS added) and
// a ChatML template.
void add_gpt2_vocab(gguf::Writer& w, const std::vector<std::string>& vocab,
                    const std::function<bool(const std::string&)>& skip_key) {
  const auto n_vocab = static_cast<uint32_t>(vocab.size());
  if (!skip_key("tokenizer.ggml.model")) w.add_string("tokenizer.ggml.model", "gpt2");
  if (!skip_key("tokenizer.ggml.pre")) w.add_string("tokenizer.ggml.pre", "smollm");
  if (!skip_key("tokenizer.ggml.tokens")) w.add_string_array("tokenizer.ggml.tokens", vocab);
  std::vector<int32_t> types(vocab.size(), 1);
  for (size_t i = vocab.size() - 3; i < vocab.size(); ++i) types[i] = 3;  // control
  w.add_int32_array("tokenizer.ggml.token_type", types);
  if (!skip_key("tokenizer.ggml.merges")) w.add_string_array("tokenizer.ggml.merges", tiny_merges());
  w.add_uint32("tokenizer.ggml.bos_token_id", n_vocab - 3);
  w.add_uint32("tokenizer.ggml.eos_token_id", n_vocab - 3);
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_string("tokenizer.chat_template",
               "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
               "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
               "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}");
}

// A SentencePiece vocabulary's keys (Llama 2's layout): <unk> <s> </s>, the byte tokens, then
// pieces scored by their order (earlier merges first); BOS added.
void add_spm_vocab(gguf::Writer& w, const std::vector<std::string>& vocab) {
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", vocab);
  std::vector<float> scores(vocab.size(), 0.0f);
  std::vector<int32_t> types(vocab.size(), 1);  // normal
  types[0] = 2;                                 // unknown
  types[1] = types[2] = 3;                      // control
  for (size_t i = 3; i < 3 + 256; ++i) types[i] = 6;  // byte
  for (size_t i = 3 + 256; i < vocab.size(); ++i) scores[i] = -static_cast<float>(i);
  w.add_float32_array("tokenizer.ggml.scores", scores);
  w.add_int32_array("tokenizer.ggml.token_type", types);
  w.add_uint32("tokenizer.ggml.unknown_token_id", 0);
  w.add_uint32("tokenizer.ggml.bos_token_id", 1);
  w.add_uint32("tokenizer.ggml.eos_token_id", 2);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
}

gguf::Writer tiny_model_writer(const TinyModelSpec& s) {
  gguf::Writer w;
  auto skip_key = [&](const std::string& k) {
    return std::find(s.skip_keys.begin(), s.skip_keys.end(), k) != s.skip_keys.end();
  };
  auto u32 = [&](const std::string& k, uint32_t v) { if (!skip_key(k)) w.add_uint32(k, v); };
  const std::string a = s.arch + ".";
  if (!skip_key("general.architecture")) w.add_string("general.architecture", s.arch);
  w.add_string("general.name", "tiny-test-" + s.arch);
  u32(a + "block_count", static_cast<uint32_t>(s.n_layer));
  u32(a + "context_length", static_cast<uint32_t>(s.n_ctx_train));
  u32(a + "embedding_length", static_cast<uint32_t>(s.n_embd));
  u32(a + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
  u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  if (s.head_dim > 0) {
    u32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
    u32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  }
  if (s.n_expert > 0) {
    u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff));
  }
  if (!skip_key(a + "rope.freq_base")) w.add_float32(a + "rope.freq_base", 10000.0f);
  if (!skip_key(a + "attention.layer_norm_rms_epsilon")) {
    w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  }
  const std::vector<std::string> vocab =
      s.spm_vocab ? tiny_spm_vocab() : tiny_vocab(s.vocab_multiple);
  const int64_t n_vocab = static_cast<int64_t>(vocab.size());
  if (s.spm_vocab) {
    add_spm_vocab(w, vocab);
  } else {
    add_gpt2_vocab(w, vocab, skip_key);
  }
  if (s.extra) s.extra(w);

  std::mt19937 rng(static_cast<uint32_t>(s.seed));
  const int64_t head_dim = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  auto tensor = [&](const std::string& name, formats::DType type, std::vector<int64_t> shape,
                    std::vector<uint8_t> bytes) {
    if (std::find(s.skip_tensors.begin(), s.skip_tensors.end(), name) != s.skip_tensors.end()) return;
    w.add_tensor(name, type, std::move(shape), bytes);
  };
  auto vector = [&](const std::string& name, int64_t n, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    std::vector<uint8_t> bytes(n * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    tensor(name, formats::DType::F32, {n}, std::move(bytes));
  };
  auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out, float scale) {
    tensor(name, s.matrix_type, {n_in, n_out}, random_matrix(s.matrix_type, n_in, n_out, scale, rng));
  };
  matrix("token_embd.weight", s.n_embd, n_vocab, 1.0f);
  tensor("output_norm.weight", formats::DType::F32, {s.n_embd}, norm_vector(s.n_embd, rng));
  if (!s.tied_output) matrix("output.weight", s.n_embd, n_vocab, 0.2f);
  if (s.rope_freqs) {
    std::uniform_real_distribution<float> factor(1.0f, 8.0f);
    std::vector<float> v(head_dim / 2);
    for (float& x : v) x = factor(rng);
    std::vector<uint8_t> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    tensor("rope_freqs.weight", formats::DType::F32, {head_dim / 2}, std::move(bytes));
  }
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    tensor(p + "attn_norm.weight", formats::DType::F32, {s.n_embd}, norm_vector(s.n_embd, rng));
    matrix(p + "attn_q.weight", s.n_embd, s.n_head * head_dim, in_scale);
    matrix(p + "attn_k.weight", s.n_embd, s.n_head_kv * head_dim, in_scale);
    matrix(p + "attn_v.weight", s.n_embd, s.n_head_kv * head_dim, in_scale);
    if (s.qkv_bias) {
      vector(p + "attn_q.bias", s.n_head * head_dim, 0.5f);
      vector(p + "attn_k.bias", s.n_head_kv * head_dim, 0.5f);
      vector(p + "attn_v.bias", s.n_head_kv * head_dim, 0.5f);
    }
    if (s.qk_norm) {
      tensor(p + "attn_q_norm.weight", formats::DType::F32, {head_dim}, norm_vector(head_dim, rng));
      tensor(p + "attn_k_norm.weight", formats::DType::F32, {head_dim}, norm_vector(head_dim, rng));
    }
    matrix(p + "attn_output.weight", s.n_head * head_dim, s.n_embd, in_scale);
    tensor(p + "ffn_norm.weight", formats::DType::F32, {s.n_embd}, norm_vector(s.n_embd, rng));
    const float ff_scale = 1.0f / std::sqrt(static_cast<float>(s.n_ff));
    if (s.n_expert > 0) {
      // The router in f32 (as llama.cpp's conversions keep it), the experts stacked.
      tensor(p + "ffn_gate_inp.weight", formats::DType::F32, {s.n_embd, s.n_expert},
             random_matrix(formats::DType::F32, s.n_embd, s.n_expert, 2 * in_scale, rng));
      auto experts = [&](const std::string& name, int64_t n_in, int64_t n_out, float scale) {
        tensor(name, s.matrix_type, {n_in, n_out, s.n_expert},
               random_matrix(s.matrix_type, n_in, n_out * s.n_expert, scale, rng));
      };
      experts(p + "ffn_gate_exps.weight", s.n_embd, s.n_ff, in_scale);
      experts(p + "ffn_up_exps.weight", s.n_embd, s.n_ff, in_scale);
      experts(p + "ffn_down_exps.weight", s.n_ff, s.n_embd, ff_scale);
      continue;
    }
    matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff, in_scale);
    matrix(p + "ffn_up.weight", s.n_embd, s.n_ff, in_scale);
    matrix(p + "ffn_down.weight", s.n_ff, s.n_embd, ff_scale);
  }
  return w;
}

void write_tiny_model(const std::string& path, const TinyModelSpec& spec) {
  tiny_model_writer(spec).write(path);
}

TinyModelSpec tiny_arch_spec(const std::string& name) {
  TinyModelSpec s;
  s.arch = name;
  s.n_layer = 3;
  s.tied_output = false;
  // f32 weights: no 8-bit rounding of the activations, which turns last-bit differences of the
  // kernel tiers' sum orders into logit differences of ~1% on random weights.
  s.matrix_type = formats::DType::F32;
  if (name == "llama-rope-freqs") {
    s.arch = "llama";
    s.rope_freqs = true;
  } else if (name == "llama-spm") {
    s.arch = "llama";
    s.spm_vocab = true;
  } else if (name == "qwen2") {
    s.qkv_bias = true;
  } else if (name == "qwen3" || name == "qwen3moe") {
    s.qk_norm = true;
    s.head_dim = 32;  // n_head * head_dim = 128, twice n_embd
    if (name == "qwen3moe") {
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_ff = 32;
    }
  } else if (name != "llama") {
    throw std::invalid_argument("no tiny reference model of architecture '" + name + "'");
  }
  return s;
}

}  // namespace squeeze::testing
