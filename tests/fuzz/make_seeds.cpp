// Writes the seed corpora of the fuzz harnesses into OUT/<harness>/ (scripts/fuzz.sh runs it):
// files squeeze itself writes (the tiny test model, a sparsified one, a saved-logits file) and
// the shipped model's header and metadata cut down to a seed's size.
// usage: fuzz_make_seeds OUT [MODEL]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "eval/logits_file.h"
#include "gguf/gguf.h"
#include "sparsity/thresholds.h"
#include "targets.h"
#include "tiny_model.h"

namespace fs = std::filesystem;
using namespace squeeze;

namespace {

fs::path g_out;

void put(const std::string& harness, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_out / harness);
  std::ofstream(g_out / harness / name, std::ios::binary) << bytes;
}
void put(const std::string& harness, const std::string& name, const std::vector<uint8_t>& b) {
  put(harness, name, std::string(b.begin(), b.end()));
}

// The smallest model the loader binds: one layer, 32-wide, and (instead of the tiny vocabulary's
// 263 tokens) 16 tokens, so that the seed is about 6 KB.
testing::TinyModelSpec small_spec(bool tied_output = true) {
  testing::TinyModelSpec s;
  s.n_embd = 32;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.n_ff = 32;
  s.n_layer = 1;
  s.matrix_type = formats::DType::Q4_0;
  s.skip_keys = {"tokenizer.ggml.tokens"};
  s.tied_output = tied_output;
  s.skip_tensors = {"token_embd.weight", "output.weight"};
  s.extra = [tied_output](gguf::Writer& w) {
    std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "h", "e",
                                       "l", "o", "he", "ll", "hell", "Ġ", "t", "Ġt", "Ġthe", "r", "or"};
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    const size_t row = formats::row_bytes(formats::DType::Q8_0, 32);
    w.add_tensor("token_embd.weight", formats::DType::Q8_0, {32, 16},
                 std::vector<uint8_t>(row * tokens.size(), 0x11));
    if (!tied_output) {
      w.add_tensor("output.weight", formats::DType::Q8_0, {32, 16},
                   std::vector<uint8_t>(row * tokens.size(), 0x22));
    }
  };
  return s;
}

sparsity::ThresholdTable table(sparsity::Method method, int64_t n_layer, bool head) {
  sparsity::ThresholdTable t;
  t.method = method;
  t.n_layer = n_layer;
  t.levels = {0.0f, 0.25f, 0.5f};
  t.thresholds.assign(static_cast<size_t>(n_layer) * t.sites() * t.levels.size(), 0.0f);
  for (size_t i = 0; i < t.thresholds.size(); ++i) t.thresholds[i] = 0.01f * static_cast<float>(i % 7);
  if (head) t.head = {0.0f, 0.1f, 0.2f};
  return t;
}

void gguf_seeds(const std::string& model) {
  put("gguf", "tiny_q4_0.gguf", testing::tiny_model_writer(small_spec()).to_bytes());
  testing::TinyModelSpec untied = small_spec(/*tied_output=*/false);
  untied.matrix_type = formats::DType::Q4_0;
  put("gguf", "tiny_q4_0_untied.gguf", testing::tiny_model_writer(untied).to_bytes());
  testing::TinyModelSpec sparse = small_spec();
  sparse.extra = [base = sparse.extra](gguf::Writer& w) {
    base(w);
    table(sparsity::Method::Teal, 1, true).write(w);
  };
  put("gguf", "tiny_teal.gguf", testing::tiny_model_writer(sparse).to_bytes());
  // The llama family's other layers: qwen2's biases and rope_freqs, qwen3's head norms,
  // qwen3moe's router and stacked experts.
  testing::TinyModelSpec qwen2 = small_spec();
  qwen2.arch = "qwen2";
  qwen2.qkv_bias = true;
  qwen2.rope_freqs = true;
  put("gguf", "tiny_qwen2.gguf", testing::tiny_model_writer(qwen2).to_bytes());
  testing::TinyModelSpec qwen3 = small_spec();
  qwen3.arch = "qwen3";
  qwen3.qk_norm = true;
  put("gguf", "tiny_qwen3.gguf", testing::tiny_model_writer(qwen3).to_bytes());
  testing::TinyModelSpec moe = qwen3;
  moe.arch = "qwen3moe";
  moe.n_expert = 4;
  moe.n_expert_used = 2;
  put("gguf", "tiny_qwen3moe.gguf", testing::tiny_model_writer(moe).to_bytes());

  // Every value type once.
  gguf::Writer w(64);
  w.add_uint8("u8", 1);
  w.add_int8("i8", -1);
  w.add_uint16("u16", 2);
  w.add_int16("i16", -2);
  w.add_uint32("general.alignment_like", 64);
  w.add_int32("i32", -3);
  w.add_uint64("u64", 4);
  w.add_int64("i64", -4);
  w.add_float32("f32", 0.5f);
  w.add_float64("f64", 0.25);
  w.add_bool("b", true);
  w.add_string("general.architecture", "llama");
  w.add_string_array("sa", {"a", "bc"});
  w.add_int32_array("ia", {1, 2, 3});
  w.add_float32_array("fa", {1.0f, 2.0f});
  std::vector<uint8_t> row(34, 0);
  w.add_tensor("t", formats::DType::Q8_0, {32, 1}, row);
  put("gguf", "all_types.gguf", w.to_bytes());

  if (!fs::exists(model)) {
    std::fprintf(stderr, "fuzz_make_seeds: %s is missing; no seeds from the shipped model\n",
                 model.c_str());
    return;
  }
  // The shipped model's first 4 KiB (header, first keys, the start of the vocabulary) ...
  std::ifstream in(model, std::ios::binary);
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  put("gguf", "smollm2_head.gguf", head);
  // ... and its metadata with the vocabulary cut to its first 100 tokens and merges, no tensors.
  const gguf::File src = gguf::File::open(model);
  const std::string_view big[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                                  "tokenizer.ggml.token_type"};
  gguf::Writer meta;
  meta.copy_metadata(src, big);
  auto first = [](std::vector<std::string_view> v, size_t n) {
    return std::vector<std::string>(v.begin(), v.begin() + static_cast<ptrdiff_t>(std::min(n, v.size())));
  };
  meta.add_string_array("tokenizer.ggml.tokens", first(src.require_string_array("tokenizer.ggml.tokens"), 100));
  meta.add_string_array("tokenizer.ggml.merges", first(src.require_string_array("tokenizer.ggml.merges"), 100));
  const std::vector<int64_t> types = src.get_int_array("tokenizer.ggml.token_type");
  meta.add_int32_array("tokenizer.ggml.token_type",
                       std::vector<int32_t>(types.begin(), types.begin() + std::min<size_t>(100, types.size())));
  put("gguf", "smollm2_metadata.gguf", meta.to_bytes());
  put("chat_template", "smollm2.txt",
      std::string(src.require_string("tokenizer.chat_template")) +
          std::string("\0\1\0system\0Be brief.\0user\0What is 2+2?\0assistant\0Four.", 51));
}

void sparsity_seeds() {
  // Metadata only: the harness binds the table to the 2-layer tiny model.
  const struct {
    const char* name;
    sparsity::Method method;
    bool head;
  } kinds[] = {{"teal_head.gguf", sparsity::Method::Teal, true},
               {"cats.gguf", sparsity::Method::Cats, false},
               {"relu.gguf", sparsity::Method::Relu, false}};
  for (const auto& k : kinds) {
    gguf::Writer w;
    w.add_string("general.architecture", "llama");
    (k.method == sparsity::Method::Relu ? sparsity::ThresholdTable::relu(2) : table(k.method, 2, k.head))
        .write(w);
    put("sparsity", k.name, w.to_bytes());
  }
}

void logits_seeds() {
  eval::LogitsHeader h;
  h.n_vocab = 20;
  h.vocab_hash = 1;
  h.tokenizer_hash = 2;
  h.n_ctx = 8;
  h.n_chunks = 2;
  h.first = 4;
  h.n_scored = 3;
  h.n_text_tokens = 16;
  h.tokens_hash = 3;
  const fs::path tmp = g_out / "logits.tmp";
  {
    eval::LogitsWriter w(tmp.string(), h);
    std::vector<float> logits(h.n_vocab);
    std::vector<eval::LogitsRow> rows(h.n_scored);
    for (uint32_t c = 0; c < h.n_chunks; ++c) {
      for (uint32_t r = 0; r < h.n_scored; ++r) {
        for (uint32_t i = 0; i < h.n_vocab; ++i) logits[i] = static_cast<float>((i * 7 + r + c) % 11) * 1.5f;
        eval::encode_row(logits.data(), h.n_vocab, static_cast<int32_t>(r), rows[r]);
      }
      w.write_chunk(c, rows);
    }
    w.commit();
  }
  std::ifstream in(tmp, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(tmp);
  put("logits", "two_chunks_fixed", "\1" + file);  // checksums recomputed by the harness
  put("logits", "two_chunks_raw", std::string(1, '\0') + file);
}

void text_seeds() {
  const std::string texts[] = {
      "Hello world! It's 2026; the café costs 3.50€.",
      "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
      "  leading spaces\n\n\ttabs and 12345678 digits 's 've 're",
      "日本語のテキストと emoji 🙂 and combining é",
      "<|endoftext|><|im_end|><|im_start|>",
  };
  for (int flags = 0; flags < 4; ++flags) {
    int i = 0;
    for (const std::string& t : texts) {
      put("tokenizer", "text" + std::to_string(i++) + "_f" + std::to_string(flags),
          std::string(1, static_cast<char>(flags | 4)) + t);
    }
  }
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
      "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  put("chat_template", "chatml.txt", chatml + std::string("\0\1\0user\0hi", 11));
  // Most of the engine's constructs in one template (tokenizer/jinja.h).
  const std::string constructs =
      "{%- macro render(m, sep='\\n') -%}{{ m['role'] | upper }}{{ sep }}{{ m.content | trim }}"
      "{%- endmacro -%}{%- set ns = namespace(n=0, last='') -%}"
      "{%- if messages and messages[0].role == 'system' %}{% set sys = messages[0].content %}"
      "{% set rest = messages[1:] %}{% else %}{% set rest = messages %}{% endif -%}"
      "{{ bos_token }}{%- for m in rest if m.content is string -%}{%- set ns.n = ns.n + 1 -%}"
      "{%- if loop.first and sys is defined %}[{{ sys | tojson }}]{% endif %}"
      "{%- if m.role not in ['user', 'assistant'] %}{{ raise_exception('bad role ' ~ m.role) }}"
      "{%- elif (m.role == 'user') != (loop.index0 % 2 == 0) %}{% continue %}{% endif -%}"
      "{{ render(m) }}{{ '<|end|>' if not loop.last else '' }}\n{%- endfor -%}"
      "{{ ns.n }} {{ rest | map(attribute='role') | join(',') }} {{ 'x'.split(',')[0][::-1] }}"
      "{%- if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";
  put("chat_template", "constructs.txt",
      constructs + std::string("\0\1\0system\0Be brief.\0user\0What is 2+2?\0assistant\0Four.", 51));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds OUT [MODEL]\n");
    return 2;
  }
  try {
    g_out = argv[1];
    fs::create_directories(g_out);
    gguf_seeds(argc > 2 ? argv[2] : fuzz::default_model_path());
    sparsity_seeds();
    logits_seeds();
    text_seeds();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
