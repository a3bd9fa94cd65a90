// llama.cpp's per-ending HellaSwag scores of chosen tasks, two ways: in llama-perplexity
// --hellaswag's own batch layout (the common prefix once, shared by four sequences, then the four
// endings, in one unified KV cache) and with each of the four sequences decoded alone from an
// empty cache (the layout squeeze's forward pass equals bit for bit). llama-perplexity prints
// only running accuracies; this prints the scores, so the two layouts and squeeze's
// `hellaswag --per-task` table can be compared ending by ending.
//
// Built against llama.cpp's libraries by tools/build_llamacpp.sh's tree (see bench/
// hellaswag_layouts.py, which builds and runs it). Takes llama-perplexity's own flags (-m, -f,
// -t, -fa, ...), so the context is set up exactly as there, and task indices (0-based, in the
// task file) on stdin. Prints, per task and layout:
//   index <TAB> layout <TAB> score0..score3 (%.9g) <TAB> chosen ending
// The scoring follows hellaswag_score in tools/perplexity/perplexity.cpp: the mean of the
// first ending token's log(softmax) and of the other tokens' float log-softmax.
#include "arg.h"
#include "common.h"
#include "llama.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

struct Task {
  std::vector<llama_token> seq[4];
  size_t prefix = 0;
};

// log of the float-normalised probability of `tok`, as perplexity.cpp's softmax() then std::log.
double first_logprob(const float* logits, int n_vocab, llama_token tok) {
  float max_logit = logits[0];
  for (int i = 0; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum_exp = 0.0;
  std::vector<float> p(n_vocab);
  for (int i = 0; i < n_vocab; ++i) {
    p[i] = expf(logits[i] - max_logit);
    sum_exp += p[i];
  }
  return std::log(p[tok] / sum_exp);
}

// compute_logprobs' float log-softmax.
float token_logprob(const float* logits, int n_vocab, llama_token tok) {
  float max_logit = logits[0];
  for (int j = 1; j < n_vocab; ++j) max_logit = std::max(max_logit, logits[j]);
  float sum_p = 0.f;
  for (int j = 0; j < n_vocab; ++j) sum_p += expf(logits[j] - max_logit);
  return logits[tok] - max_logit - std::log(sum_p);
}

// Decodes `batch` in n_batch pieces (perplexity.cpp's decode_helper); returns the logits of the
// entries marked for output, in batch order.
bool decode(llama_context* ctx, common_batch& batch, int n_batch, int n_vocab,
            std::vector<float>& out) {
  out.clear();
  for (int i = 0; i < batch.size(); i += n_batch) {
    const int n = std::min<int>(n_batch, batch.size() - i);
    if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch.get_sub_batch(i, n)) != 0) return false;
    int n_out = 0;
    for (int j = i; j < i + n; ++j) n_out += batch.tokens[j].output;
    const float* l = llama_get_logits(ctx);
    out.insert(out.end(), l, l + size_t(n_out) * n_vocab);
  }
  return true;
}

int choose(const double s[4]) {
  int best = 0;
  for (int k = 1; k < 4; ++k)
    if (s[k] > s[best]) best = k;
  return best;
}

void print(size_t idx, const char* layout, const double s[4]) {
  std::printf("%zu\t%s\t%.9g\t%.9g\t%.9g\t%.9g\t%d\n", idx, layout, s[0], s[1], s[2], s[3],
              choose(s));
}

}  // namespace

int main(int argc, char** argv) {
  common_params params;
  params.n_ctx = 512;
  params.escape = false;
  if (!common_params_parse(argc, argv, params, LLAMA_EXAMPLE_PERPLEXITY)) return 1;
  // As llama-perplexity sets up --hellaswag.
  params.n_parallel = std::max(4, params.n_parallel);
  params.kv_unified = true;
  params.n_ctx = params.n_parallel * params.n_ctx;
  params.n_batch = std::min(params.n_batch, params.n_ctx);

  std::vector<std::string> lines;
  {
    std::ifstream f(params.prompt_file);
    if (!f) {
      std::fprintf(stderr, "error: cannot read the task file '%s' (-f)\n", params.prompt_file.c_str());
      return 1;
    }
    for (std::string l; std::getline(f, l);) lines.push_back(l);
  }

  llama_backend_init();
  auto init = common_init_from_params(params);
  llama_model* model = init->model();
  llama_context* ctx = init->context();
  if (model == nullptr || ctx == nullptr) {
    std::fprintf(stderr, "error: cannot load the model\n");
    return 1;
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  common_batch batch(ctx);
  std::vector<float> logits;

  for (size_t idx; std::cin >> idx;) {
    if (idx * 6 + 6 > lines.size()) {
      std::fprintf(stderr, "error: task %zu is past the end of the file\n", idx);
      return 1;
    }
    Task t;
    for (int k = 0; k < 4; ++k)
      t.seq[k] = common_tokenize(ctx, lines[idx * 6] + " " + lines[idx * 6 + 2 + k], true);
    while (t.prefix < t.seq[0].size() && t.seq[0][t.prefix] == t.seq[1][t.prefix] &&
           t.seq[0][t.prefix] == t.seq[2][t.prefix] && t.seq[0][t.prefix] == t.seq[3][t.prefix])
      ++t.prefix;

    // llama-perplexity's layout: prefix shared by sequences 0..3, then each ending.
    batch.clear();
    for (size_t i = 0; i < t.prefix; ++i) batch.add(t.seq[0][i], i, {0, 1, 2, 3}, false);
    batch.set_output(batch.size() - 1, true);
    for (int s = 0; s < 4; ++s)
      for (size_t i = t.prefix; i < t.seq[s].size(); ++i)
        batch.add(t.seq[s][i], i, s, i < t.seq[s].size() - 1);
    llama_memory_clear(llama_get_memory(ctx), true);
    if (!decode(ctx, batch, params.n_batch, n_vocab, logits)) return 1;
    double score[4];
    size_t li = 1;
    for (int s = 0; s < 4; ++s) {
      double sum = first_logprob(logits.data(), n_vocab, t.seq[s][t.prefix]);
      size_t count = 1;
      for (size_t j = t.prefix; j + 1 < t.seq[s].size(); ++j, ++count)
        sum += token_logprob(logits.data() + li++ * n_vocab, n_vocab, t.seq[s][j + 1]);
      score[s] = sum / count;
    }
    print(idx, "batch", score);

    // Each sequence alone, from an empty cache.
    for (int s = 0; s < 4; ++s) {
      batch.clear();
      for (size_t i = 0; i < t.seq[s].size(); ++i)
        batch.add(t.seq[s][i], i, 0, i + 1 >= t.prefix && i + 1 < t.seq[s].size());
      llama_memory_clear(llama_get_memory(ctx), true);
      if (!decode(ctx, batch, params.n_batch, n_vocab, logits)) return 1;
      double sum = first_logprob(logits.data(), n_vocab, t.seq[s][t.prefix]);
      size_t count = 1;
      for (size_t j = t.prefix; j + 1 < t.seq[s].size(); ++j, ++count)
        sum += token_logprob(logits.data() + (j - t.prefix + 1) * n_vocab, n_vocab, t.seq[s][j + 1]);
      score[s] = sum / count;
    }
    print(idx, "alone", score);
    std::fflush(stdout);
  }
  return 0;
}
