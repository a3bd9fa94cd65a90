// llama.cpp's greedy continuations of prompts, for reference fixtures of architectures the
// Python bindings are not needed for (tools/make_greedy_fixture.sh builds and runs it).
//
//   llama-greedy MODEL N_PREDICT THREADS [all-logits] < prompts
//
// One prompt per input line, with "\n" written as the two characters \ and n. For each, one
// line of JSON on stdout: {"prompt": ..., "prompt_ids": [...], "greedy": [...], "top5": [...]}:
// the prompt's ids (BOS added as the vocab asks, special tokens not parsed), N_PREDICT greedy
// ids (fewer when an end-of-generation token comes; it is included) and per step the five
// largest logits as [id, logit] pairs; with all-logits, also "logits": per step every logit
// (for the tiny random-weight models of the architecture tests). Flash attention is off (squeeze
// follows that path); each prompt decodes in one batch from an empty context.
//
// With LLAMA_GREEDY_DUMP=DIR set, every f32 intermediate of the first prompt's batch (of its
// LLAMA_GREEDY_DUMP_STEP-th decode step instead, when that is set) is written to DIR/NAME.f32 (NAME as llama.cpp names it, e.g. attn_norm-0; raw floats, the fastest
// dimension first), to find where squeeze first parts from llama.cpp.
#include "ggml.h"
#include "llama.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

namespace {

std::string unescape(const std::string& line) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n') {
      out.push_back('\n');
      ++i;
    } else {
      out.push_back(line[i]);
    }
  }
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  return out + "\"";
}

std::string json_ids(const std::vector<llama_token>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

const char* g_dump_dir = nullptr;
bool g_dumping = false;

bool dump_tensor(ggml_tensor* t, bool ask, void*) {
  if (ask) return g_dumping && t->type == GGML_TYPE_F32;
  if (!g_dumping || t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) return true;
  const std::string path = std::string(g_dump_dir) + "/" + t->name + ".f32";
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(t->data, 1, ggml_nbytes(t), f);
    std::fclose(f);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const bool all_logits = argc == 5 && std::string(argv[4]) == "all-logits";
  if (argc != 4 && !all_logits) {
    std::fprintf(stderr, "usage: %s MODEL N_PREDICT THREADS [all-logits] < prompts\n", argv[0]);
    return 2;
  }
  const int n_predict = std::atoi(argv[2]);
  const int threads = std::atoi(argv[3]);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  for (std::string line; std::getline(std::cin, line);) {
    const std::string prompt = unescape(line);
    std::vector<llama_token> ids(prompt.size() + 8);
    const int n = llama_tokenize(vocab, prompt.data(), static_cast<int32_t>(prompt.size()),
                                 ids.data(), static_cast<int32_t>(ids.size()), true, false);
    if (n < 0) return 1;
    ids.resize(n);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(n + n_predict + 16);
    cp.n_batch = cp.n_ubatch = cp.n_ctx;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    g_dump_dir = std::getenv("LLAMA_GREEDY_DUMP");
    const char* dump_step = std::getenv("LLAMA_GREEDY_DUMP_STEP");
    const int dump_at = dump_step != nullptr ? std::atoi(dump_step) : 0;
    if (g_dump_dir != nullptr) cp.cb_eval = dump_tensor;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (ctx == nullptr) return 1;
    std::vector<llama_token> prompt_ids = ids, out;
    std::string tops = "[";  // per step: the 5 largest logits as [id, logit] pairs
    std::string every = "[";  // per step: every logit (all-logits)
    llama_batch batch = llama_batch_get_one(ids.data(), static_cast<int32_t>(ids.size()));
    llama_token next = 0;
    for (int i = 0; i < n_predict; ++i) {
      g_dumping = g_dump_dir != nullptr && i == dump_at;
      if (llama_decode(ctx, batch) != 0) return 1;
      g_dumping = false;
      const float* logits = llama_get_logits_ith(ctx, -1);
      next = 0;
      for (int v = 1; v < n_vocab; ++v) {
        if (logits[v] > logits[next]) next = v;
      }
      out.push_back(next);
      std::vector<int> order(n_vocab);
      for (int v = 0; v < n_vocab; ++v) order[v] = v;
      std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                        [&](int a, int b) { return logits[a] > logits[b]; });
      tops += i ? ", [" : "[";
      for (int k = 0; k < 5; ++k) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s[%d, %.9g]", k ? ", " : "", order[k], logits[order[k]]);
        tops += buf;
      }
      tops += "]";
      if (all_logits) {
        every += i ? ", [" : "[";
        for (int v = 0; v < n_vocab; ++v) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%s%.7g", v ? ", " : "", logits[v]);
          every += buf;
        }
        every += "]";
      }
      if (llama_vocab_is_eog(vocab, next)) break;
      batch = llama_batch_get_one(&next, 1);
    }
    std::printf("{\"prompt\": %s, \"prompt_ids\": %s, \"greedy\": %s, \"top5\": %s]%s%s%s}\n",
                json_string(prompt).c_str(), json_ids(prompt_ids).c_str(), json_ids(out).c_str(),
                tops.c_str(), all_logits ? ", \"logits\": " : "", all_logits ? every.c_str() : "",
                all_logits ? "]" : "");
    std::fflush(stdout);
    llama_free(ctx);
  }
  llama_model_free(model);
  return 0;
}
