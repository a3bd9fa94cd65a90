#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"
#include "eval/log_softmax.h"

namespace squeeze::eval {

ChunkPlan plan_chunks(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks) {
  if (n_ctx < 4) throw UsageError("--ctx must be at least 4 for perplexity");
  if (n_tokens < 2 * n_ctx) {
    throw UsageError("the text tokenizes to " + std::to_string(n_tokens) +
                     " tokens; perplexity with --ctx " + std::to_string(n_ctx) +
                     " needs at least " + std::to_string(2 * n_ctx));
  }
  ChunkPlan p;
  p.n_ctx = n_ctx;
  p.n_chunks = n_tokens / n_ctx;
  if (max_chunks >= 0) p.n_chunks = std::min(p.n_chunks, max_chunks);
  if (p.n_chunks < 1) throw UsageError("--chunks must be at least 1");
  p.first = n_ctx / 2;
  return p;
}

double NllStats::ppl() const { return count ? std::exp(sum / count) : 0.0; }

double NllStats::ppl_error() const {
  if (count < 2) return 0.0;
  const double mean = sum / count;
  const double var = sum2 / count - mean * mean;
  return var > 0 ? ppl() * std::sqrt(var / (count - 1)) : 0.0;
}

double token_nll(const float* logits, int64_t n_vocab, int32_t target) {
  return -row_softmax(logits, n_vocab).log_prob(logits, target);
}

LogitsHeader run_header(const tokenizer::VocabData& vocab, std::span<const int32_t> tokens,
                        const ChunkPlan& plan) {
  LogitsHeader h;
  h.n_vocab = static_cast<uint32_t>(vocab.tokens.size());
  h.vocab_hash = vocab_hash(vocab);
  h.tokenizer_hash = tokenizer_hash(vocab);
  h.n_ctx = static_cast<uint32_t>(plan.n_ctx);
  h.n_chunks = static_cast<uint32_t>(plan.n_chunks);
  h.first = static_cast<uint32_t>(plan.first);
  h.n_scored = static_cast<uint32_t>(plan.n_scored());
  h.n_text_tokens = tokens.size();
  h.tokens_hash = tokens_hash(tokens);
  return h;
}

PerplexityResult run_perplexity(model::Context& ctx, ThreadPool& pool,
                                std::span<const int32_t> tokens, int32_t bos,
                                const ChunkPlan& plan, const PerplexityOptions& opt) {
  const int64_t n_vocab = ctx.model().hparams().n_vocab;
  const int64_t n_ctx = plan.n_ctx, first = plan.first, n_scored = plan.n_scored();
  if (ctx.n_ctx() < n_ctx) throw UsageError("internal: context smaller than the chunk size");
  if (plan.n_chunks * n_ctx > static_cast<int64_t>(tokens.size())) {
    throw UsageError("internal: chunk plan exceeds the text");
  }
  if (opt.base != nullptr && plan.n_chunks > opt.base->header().n_chunks) {
    throw UsageError("the saved logits hold " + std::to_string(opt.base->header().n_chunks) +
                     " chunks; --chunks asks for " + std::to_string(plan.n_chunks));
  }
  PerplexityResult res;
  res.plan = plan;
  KldStats kld;
  std::vector<int32_t> chunk(n_ctx);
  std::vector<double> nll(n_scored);                        // [n_scored]
  std::vector<LogitsRow> rows(opt.save || opt.base ? n_scored : 0);
  std::vector<KldRow> cmp(opt.base ? n_scored : 0);
  const Timer timer;

  for (int64_t c = 0; c < plan.n_chunks; ++c) {
    if (opt.interrupted && opt.interrupted()) throw Error("interrupted");
    const auto src = tokens.subspan(c * n_ctx, n_ctx);
    std::copy(src.begin(), src.end(), chunk.begin());
    if (bos >= 0) chunk[0] = bos;
    if (opt.base != nullptr) opt.base->read_chunk(static_cast<uint32_t>(c), rows);

    ctx.reset();
    // [n_ctx - first, n_vocab]: row j holds the logits of position first + j.
    const std::span<const float> logits = ctx.decode_from(chunk, first);
    // Row j predicts src[first + 1 + j] (the original tokens: BOS replaces position 0 only).
    pool.parallel_for(n_scored, 1, [&](int64_t j0, int64_t j1, int) {
      for (int64_t j = j0; j < j1; ++j) {
        const float* row = logits.data() + j * n_vocab;
        const int32_t target = src[first + 1 + j];
        if (opt.base != nullptr) {
          cmp[j] = compare_row(row, n_vocab, target, rows[j]);
          nll[j] = cmp[j].nll;
        } else if (opt.save != nullptr) {
          encode_row(row, n_vocab, target, rows[j]);
          nll[j] = token_nll(row, n_vocab, target);
        } else {
          nll[j] = token_nll(row, n_vocab, target);
        }
      }
    });
    for (int64_t j = 0; j < n_scored; ++j) {
      res.nll.add(nll[j]);
      if (opt.base != nullptr) kld.add(cmp[j]);
    }
    if (opt.base != nullptr && n_scored > 0) res.first_same_top += cmp[0].same_top;
    if (opt.save != nullptr) opt.save->write_chunk(static_cast<uint32_t>(c), rows);
    if (opt.progress) opt.progress(c + 1, plan.n_chunks, res.nll.ppl(), kld.mean_kld(), kld.top1());
  }
  res.seconds = timer.seconds();
  if (opt.base != nullptr) res.kld = kld.report();
  return res;
}

}  // namespace squeeze::eval
