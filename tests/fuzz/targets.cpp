#include "targets.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "eval/logits_file.h"
#include "gguf/gguf.h"
#include "model/act_sparsity.h"
#include "sample/sampler.h"
#include "serve/openai.h"
#include "sparsity/thresholds.h"
#include "tiny_model.h"
#include "tokenizer/chat_template.h"

namespace squeeze::fuzz {

namespace {

// An invariant of the code under test that the input broke: not an input error, a bug.
[[noreturn]] void invariant_failed(const char* what) {
  std::fprintf(stderr, "fuzz invariant failed: %s\n", what);
  std::abort();
}

// Runs f; squeeze::Error is the expected way to refuse an input.
template <typename F>
void refusing_is_fine(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

// Every typed getter (each answers or throws Error) on one key, chosen by the input.
void every_getter(const gguf::File& file, const std::string& key) {
  refusing_is_fine([&] { (void)file.get_int(key); });
  refusing_is_fine([&] { (void)file.get_float(key); });
  refusing_is_fine([&] { (void)file.get_string(key); });
  refusing_is_fine([&] { (void)file.get_bool(key); });
  refusing_is_fine([&] { (void)file.require_string_array(key); });
  refusing_is_fine([&] { (void)file.get_int_array(key); });
  refusing_is_fine([&] { (void)file.get_float_array(key); });
}

// The getter of each key's own type on every key (these must not throw: the reader checked the
// values), all getters on one of them, and the index of keys and tensors.
void read_every_key(const gguf::File& file, size_t pick) {
  using gguf::ValueType;
  for (const gguf::KeyValue& kv : file.metadata()) {
    const gguf::Value& v = kv.value;
    if (file.find(kv.key) != &v) invariant_failed("find() misses a key of metadata()");
    switch (v.type) {
      case ValueType::Float32: case ValueType::Float64: (void)file.get_float(kv.key); break;
      case ValueType::Bool: (void)file.get_bool(kv.key); break;
      case ValueType::String: (void)file.get_string(kv.key); break;
      case ValueType::Array:
        if (v.array_type == ValueType::String) {
          (void)file.require_string_array(kv.key);
        } else if (v.array_type == ValueType::Float32 || v.array_type == ValueType::Float64) {
          (void)file.get_float_array(kv.key);
        } else {
          refusing_is_fine([&] { (void)file.get_int_array(kv.key); });  // uint64 may not fit
        }
        break;
      default: refusing_is_fine([&] { (void)file.get_int(kv.key); });  // uint64 may not fit
    }
  }
  if (!file.metadata().empty()) every_getter(file, file.metadata()[pick % file.metadata().size()].key);
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (file.find_tensor(t.name) != &t) invariant_failed("find_tensor() misses a tensor");
    const auto* begin = static_cast<const uint8_t*>(t.data);
    if (begin < file.file_data() || t.n_bytes > file.file_size() ||
        begin + t.n_bytes > file.file_data() + file.file_size()) {
      invariant_failed("tensor data outside the file");
    }
  }
}

void use_vocab(const gguf::File& file) {
  tokenizer::Tokenizer tok(tokenizer::read_vocab(file));
  const std::vector<tokenizer::Token> ids = tok.encode("Hello world <|im_start|>", true, true);
  (void)tok.decode(ids, true);
  if (!tok.vocab().chat_template.empty()) {
    refusing_is_fine([&] {
      (void)tokenizer::ChatTemplate::for_model(tok.vocab(), "").apply({{"user", "hi"}}, true);
    });
  }
}

// NUL-separated fields of data.
std::vector<std::string_view> split_fields(Bytes data) {
  std::vector<std::string_view> out;
  const auto* s = reinterpret_cast<const char*>(data.data());
  size_t start = 0;
  for (size_t i = 0; i <= data.size(); ++i) {
    if (i == data.size() || s[i] == '\0') {
      out.emplace_back(s + start, i - start);
      start = i + 1;
    }
  }
  return out;
}

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// Recomputes the checksums of a saved-logits file in place (layout: docs/FORMATS.md, "Saved
// logits": an 80-byte header with its checksum at 72, then chunks of a 16-byte record header
// whose n_bytes is at 8, n_bytes of rows and a checksum of the rows).
void fix_logits_checksums(std::vector<uint8_t>& f) {
  constexpr size_t kHeader = 80;
  if (f.size() < kHeader) return;
  const uint64_t h = fnv1a(f.data(), 72);
  std::memcpy(f.data() + 72, &h, 8);
  size_t pos = kHeader;
  while (f.size() - pos >= 16) {
    uint64_t n = 0;
    std::memcpy(&n, f.data() + pos + 8, 8);
    if (n > f.size() - pos - 16 || f.size() - pos - 16 - n < 8) return;
    const uint64_t sum = fnv1a(f.data() + pos + 16, n);
    std::memcpy(f.data() + pos + 16 + n, &sum, 8);
    pos += 16 + n + 8;
  }
}

}  // namespace

void gguf_input(Bytes data) {
  refusing_is_fine([&] {
    gguf::File file = gguf::File::from_bytes("fuzz.gguf", data);
    read_every_key(file, data.size());
    refusing_is_fine([&] { use_vocab(file); });
    refusing_is_fine([&] { (void)sparsity::ThresholdTable::read(file); });
    const std::unique_ptr<model::Model> m = model::Model::load(std::move(file));
    (void)m->weight_bytes();
  });
}

void tokenizer_input(const tokenizer::Tokenizer& tok, Bytes data) {
  if (data.empty()) return;
  const uint8_t flags = data[0];
  const bool add_special = flags & 1, parse_special = flags & 2, render_special = flags & 4;
  const std::string_view text(reinterpret_cast<const char*>(data.data() + 1), data.size() - 1);

  const std::vector<tokenizer::Token> ids = tok.encode(text, add_special, parse_special);
  for (tokenizer::Token t : ids) {
    if (t < 0 || t >= tok.n_vocab()) invariant_failed("encode() made an id outside the vocab");
  }
  (void)tok.decode(ids, render_special);

  // The same bytes as ids: any value, in the vocab or not.
  std::vector<tokenizer::Token> raw(text.size() / sizeof(tokenizer::Token));
  if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * sizeof(tokenizer::Token));
  refusing_is_fine([&] { (void)tok.decode(raw, render_special); });
  refusing_is_fine([&] {
    tokenizer::StreamDecoder stream(tok, render_special);
    for (tokenizer::Token t : raw) (void)stream.push(t);
    (void)stream.flush();
  });
  for (tokenizer::Token t : raw) (void)tok.is_eog(t);
}

void chat_template_input(Bytes data) {
  const std::vector<std::string_view> fields = split_fields(data);
  const bool add_generation_prompt = fields.size() > 1 && !fields[1].empty() && (fields[1][0] & 1);
  std::vector<tokenizer::ChatMessage> messages;
  for (size_t i = 2; i + 1 < fields.size(); i += 2) {
    messages.push_back({std::string(fields[i]), std::string(fields[i + 1])});
  }
  refusing_is_fine([&] {
    const tokenizer::ChatTemplate tmpl(fields[0], "<s>", "</s>", add_generation_prompt);
    (void)tmpl.apply(messages, add_generation_prompt, /*now=*/1767268800);
  });
}

void logits_input(Bytes data, const std::string& temp_path) {
  if (data.empty()) return;
  std::vector<uint8_t> file(data.begin() + 1, data.end());
  if (data[0] & 1) fix_logits_checksums(file);
  std::FILE* f = std::fopen(temp_path.c_str(), "wb");
  if (f == nullptr || std::fwrite(file.data(), 1, file.size(), f) != file.size() ||
      std::fclose(f) != 0) {
    invariant_failed("cannot write the temporary file");
  }
  refusing_is_fine([&] {
    eval::LogitsReader reader(temp_path);
    reader.check_matches(reader.header());  // a file matches its own identity
    std::vector<eval::LogitsRow> rows;
    for (uint32_t c = 0; c < reader.header().n_chunks; ++c) reader.read_chunk(c, rows);
  });
}

void sparsity_input(const model::Model& model, Bytes data) {
  static ThreadPool pool(1);
  refusing_is_fine([&] {
    const gguf::File file = gguf::File::from_bytes("fuzz-sparsity.gguf", data);
    const std::optional<sparsity::ThresholdTable> table = sparsity::ThresholdTable::read(file);
    if (!table) return;
    std::vector<double> targets = {table->default_level};
    for (float l : table->levels) targets.push_back(l);
    for (double target : targets) {
      refusing_is_fine([&] {
        (void)table->level_index(target);
        const std::optional<double> head =
            table->head.empty() ? std::nullopt : std::optional<double>(target);
        model::ActSparsity act(model, *table, target, pool, head, /*column_layouts=*/false);
        (void)act.level();
      });
    }
  });
}

void openai_request_input(Bytes data) {
  const std::string_view body(reinterpret_cast<const char*>(data.data()), data.size());
  const auto is_json = [](const std::string& s) { return nlohmann::json::accept(s); };
  for (const serve::RequestKind kind : {serve::RequestKind::Completion, serve::RequestKind::Chat}) {
    serve::CompletionRequest r;
    try {
      r = serve::parse_request(body, kind);
    } catch (const serve::ApiError& e) {
      if (e.status != 400 || e.type != "invalid_request_error") {
        invariant_failed("a refused request is not a 400");
      }
      if (!is_json(serve::error_body(e))) invariant_failed("an error body that is not JSON");
      continue;
    } catch (const Error&) {
      invariant_failed("a request refused with an error that is not an ApiError");
    }
    if (kind == serve::RequestKind::Chat
            ? r.messages.empty()
            : std::ranges::any_of(r.prompt_tokens, [](int32_t t) { return t < 0; })) {
      invariant_failed("an accepted request without messages or with negative token ids");
    }
    // The settings pass the sampler's checks (a throw here escapes: a bug), and the request's
    // own strings go through the response builders.
    sample::validate(serve::sampler_params(r, 0, r.n - 1));
    const std::string text =
        kind == serve::RequestKind::Chat ? r.messages.back().content : r.prompt;
    const serve::ResponseHeader h{"cmpl-fuzz", 0, r.model, r.include_usage};
    const std::vector<serve::TokenLogprob> lps = {{text, -1.0f, {{text, -1.0f}}}};
    const std::vector<serve::ChoiceResult> choices = {
        {0, text, serve::FinishReason::Stop, r.logprobs ? std::optional(lps) : std::nullopt}};
    if (!is_json(serve::completion_response(h, choices, {})) ||
        !is_json(serve::chat_response(h, choices, {})) ||
        !is_json(serve::chat_chunk(h, {0, text, std::nullopt, lps, 0}))) {
      invariant_failed("a response that is not JSON");
    }
  }
}

std::string default_model_path() {
  if (const char* p = std::getenv("SQUEEZE_FUZZ_MODEL"); p != nullptr && *p != '\0') return p;
  return SQUEEZE_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

tokenizer::Tokenizer load_tokenizer(const std::string& model_path) {
  return tokenizer::Tokenizer(tokenizer::read_vocab(gguf::File::open(model_path)));
}

std::unique_ptr<model::Model> tiny_model() {
  const std::vector<uint8_t> bytes = testing::tiny_model_writer().to_bytes();
  return model::Model::load(gguf::File::from_bytes("tiny.gguf", bytes));
}

}  // namespace squeeze::fuzz
