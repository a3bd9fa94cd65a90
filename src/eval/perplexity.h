// Perplexity with llama.cpp's llama-perplexity protocol:
//   * the whole text is tokenized once (BOS/EOS per the vocabulary's flags, special-token texts
//     not parsed), then cut into non-overlapping chunks of n_ctx tokens (at least two chunks'
//     worth of tokens are required, as llama.cpp requires);
//   * each chunk runs from an empty KV cache; when the vocabulary adds BOS, the chunk's first
//     token is replaced by BOS;
//   * logits are computed only from position first = n_ctx / 2 on, and positions first ..
//     n_ctx - 2 are scored against the next token (n_ctx - 1 - first per chunk);
//   * PPL = exp(mean NLL), error = PPL * sqrt(var(NLL) / (count - 1)).
// Optionally the base distribution is saved (LogitsWriter) or compared with (LogitsReader).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "eval/kld.h"
#include "eval/logits_file.h"
#include "model/context.h"

namespace squeeze::eval {

struct ChunkPlan {
  int64_t n_ctx = 0;
  int64_t n_chunks = 0;
  int64_t first = 0;  // first position of a chunk whose logits are computed
  int64_t n_scored() const { return n_ctx - 1 - first; }
};

// Chunks of n_ctx over n_tokens, at most max_chunks (< 0: all). Throws UsageError when the text
// has fewer than 2 * n_ctx tokens or n_ctx < 4.
ChunkPlan plan_chunks(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks = -1);

// Running -log p sums.
struct NllStats {
  double sum = 0.0, sum2 = 0.0;
  int64_t count = 0;
  void add(double nll) {
    sum += nll;
    sum2 += nll * nll;
    ++count;
  }
  double ppl() const;
  double ppl_error() const;  // llama.cpp's: ppl * sqrt(var / (count - 1))
};

// -log p(target) of one row of logits, as llama.cpp computes it.
double token_nll(const float* logits, int64_t n_vocab, int32_t target);

// The header a run of this tokenizer on these tokens would write (n_chunks from the plan).
LogitsHeader run_header(const tokenizer::VocabData& vocab, std::span<const int32_t> tokens,
                        const ChunkPlan& plan);

struct PerplexityOptions {
  LogitsWriter* save = nullptr;  // --save-logits: every chunk's rows are written here
  LogitsReader* base = nullptr;  // --kl-divergence: every chunk is compared with these rows
  // After each chunk: chunks done, total, running PPL, running mean KLD and top-1 (KLD mode).
  std::function<void(int64_t done, int64_t total, double ppl, double kld, double top1)> progress;
  // Checked between chunks; when it returns true the run throws Error("interrupted").
  std::function<bool()> interrupted;
};

struct PerplexityResult {
  ChunkPlan plan;
  NllStats nll;
  std::optional<KldReport> kld;  // with options.base
  int64_t first_same_top = 0;    // with options.base: chunks whose first scored row has the base's top-1
  double seconds = 0.0;          // evaluating the chunks
};

// Runs the protocol. `ctx` must hold plan.n_ctx tokens; `bos` < 0: the vocabulary adds no BOS.
// The pool parallelises the per-row scoring (the forward pass uses the context's own pool).
PerplexityResult run_perplexity(model::Context& ctx, ThreadPool& pool,
                                std::span<const int32_t> tokens, int32_t bos,
                                const ChunkPlan& plan, const PerplexityOptions& options = {});

}  // namespace squeeze::eval
