#include "compress/prefill_calib.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compress/output.h"
#include "core/error.h"
#include "model/names.h"

namespace squeeze::compress {

namespace {

// logp[i] = x[i] - logsumexp(x) over n values.
void log_softmax(const float* x, int64_t n, float* logp) {
  const float mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  const auto lse = static_cast<float>(mx + std::log(sum));
  for (int64_t i = 0; i < n; ++i) logp[i] = x[i] - lse;
}

void check_cancel(const std::atomic<bool>* cancel) {
  if (cancelled(cancel)) throw Interrupted("interrupted; no output written");
}

// The layers in ascending score order (ties: the later layer first).
std::vector<int32_t> order_by(const std::vector<float>& score) {
  std::vector<int32_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return score[a] < score[b] || (score[a] == score[b] && a > b);
  });
  return order;
}

}  // namespace

std::vector<float> block_influence(const model::Model& m, std::span<const int32_t> tokens,
                                   int64_t n_chunks, int64_t ctx, ThreadPool& pool,
                                   const CalibProgress& progress, const std::atomic<bool>* cancel) {
  const int64_t n_layer = m.hparams().n_layer, n_embd = m.hparams().n_embd;
  model::Context c(m, ctx, pool, ctx);
  std::vector<double> sum(static_cast<size_t>(n_layer), 0.0);
  std::vector<float> prev;  // the current layer's input
  c.set_callback([&](std::string_view name, int layer, const float* data, int64_t rows, int64_t width) {
    if (name == model::names::kInpEmbd) prev.assign(data, data + rows * width);
    if (name != model::names::kLOut) return;
    for (int64_t t = 0; t < rows; ++t) {
      const float* a = prev.data() + t * n_embd;
      const float* b = data + t * n_embd;
      double ab = 0, aa = 0, bb = 0;
      for (int64_t i = 0; i < n_embd; ++i) {
        ab += static_cast<double>(a[i]) * b[i];
        aa += static_cast<double>(a[i]) * a[i];
        bb += static_cast<double>(b[i]) * b[i];
      }
      sum[static_cast<size_t>(layer)] += 1.0 - ab / std::sqrt(std::max(aa * bb, 1e-30));
    }
    prev.assign(data, data + rows * width);
  });
  for (int64_t ch = 0; ch < n_chunks; ++ch) {
    check_cancel(cancel);
    c.reset();
    c.decode_from(tokens.subspan(static_cast<size_t>(ch * ctx), static_cast<size_t>(ctx)), ctx);
    if (progress) progress("block influence", ch + 1, n_chunks);
  }
  std::vector<float> bi(static_cast<size_t>(n_layer));
  for (int64_t il = 0; il < n_layer; ++il) {
    bi[il] = static_cast<float>(sum[il] / static_cast<double>(n_chunks * ctx));
  }
  return bi;
}

PrefillKld::PrefillKld(const model::Model& m, std::span<const int32_t> tokens, int64_t n_chunks,
                       int64_t ctx, ThreadPool& pool)
    : m_(m),
      pool_(pool),
      n_chunks_(n_chunks),
      ctx_(ctx),
      first_(ctx / 2),
      n_rows_(ctx - 1 - ctx / 2),
      tokens_(tokens.begin(), tokens.begin() + n_chunks * ctx),
      dense_(static_cast<size_t>(n_chunks * n_rows_ * m.hparams().n_vocab)),
      context_(m, ctx, pool, ctx) {
  const int64_t n_vocab = m.hparams().n_vocab;
  for (int64_t ch = 0; ch < n_chunks_; ++ch) {
    context_.reset();
    const auto l = context_.decode_from(std::span(tokens_).subspan(ch * ctx_, ctx_), first_);
    pool_.parallel_for(n_rows_, 1, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        log_softmax(l.data() + r * n_vocab, n_vocab, dense_.data() + (ch * n_rows_ + r) * n_vocab);
      }
    });
  }
}

double PrefillKld::kld(const std::vector<uint8_t>& skip) {
  const int64_t n_vocab = m_.hparams().n_vocab;
  context_.set_prefill_skip(skip);
  std::vector<double> row_kl(static_cast<size_t>(n_rows_));
  double total = 0;
  for (int64_t ch = 0; ch < n_chunks_; ++ch) {
    context_.reset();
    const auto l = context_.decode_from(std::span(tokens_).subspan(ch * ctx_, ctx_), first_);
    pool_.parallel_for(n_rows_, 1, [&](int64_t r0, int64_t r1, int) {
      std::vector<float> lp(static_cast<size_t>(n_vocab));
      for (int64_t r = r0; r < r1; ++r) {
        log_softmax(l.data() + r * n_vocab, n_vocab, lp.data());
        const float* ld = dense_.data() + (ch * n_rows_ + r) * n_vocab;
        double kl = 0;
        for (int64_t i = 0; i < n_vocab; ++i) {
          kl += std::exp(static_cast<double>(ld[i])) * (static_cast<double>(ld[i]) - lp[i]);
        }
        row_kl[r] = std::max(kl, 0.0);
      }
    });
    for (const double k : row_kl) total += k;
  }
  context_.set_prefill_skip({});
  return total / static_cast<double>(n_chunks_ * n_rows_);
}

void check_options(const model::Model& m, const PrefillCalibOptions& o) {
  if (o.score != "kld" && o.score != "bi" && o.score != "last") {
    throw UsageError("unknown --score '" + o.score + "' (kld, bi, last)");
  }
  if (o.ctx < 8 || o.ctx > m.hparams().n_ctx_train) {
    throw UsageError("--calib-ctx must be in 8.." + std::to_string(m.hparams().n_ctx_train));
  }
  if (o.n_chunks < 1) throw UsageError("--calib-chunks must be at least 1");
  if (o.candidates < 1) throw UsageError("--candidates must be at least 1");
  if (!(o.max_fraction >= 0 && o.max_fraction <= 1)) {
    throw UsageError("--max-fraction must be in 0..1");
  }
}

PrefillCalibResult calibrate_prefill(const model::Model& m, std::span<const int32_t> tokens,
                                     const PrefillCalibOptions& o, ThreadPool& pool) {
  const int64_t n_layer = m.hparams().n_layer;
  check_options(m, o);
  if (o.score != "last" && static_cast<int64_t>(tokens.size()) < o.n_chunks * o.ctx) {
    throw UsageError("the calibration text tokenizes to " + std::to_string(tokens.size()) +
                     " tokens; " + std::to_string(o.n_chunks) + " chunks of " +
                     std::to_string(o.ctx) + " need " + std::to_string(o.n_chunks * o.ctx));
  }
  PrefillCalibResult r;
  sparsity::PrefillPlan& plan = r.plan;
  plan.score = o.score;
  plan.calib_chunks = o.score == "last" ? 0 : o.n_chunks;
  plan.calib_ctx = o.score == "last" ? 0 : o.ctx;
  if (o.score == "last") {
    for (int64_t il = 0; il < n_layer; ++il) plan.scores.push_back(static_cast<float>(n_layer - 1 - il));
    plan.order = order_by(plan.scores);
    return r;
  }
  if (o.score == "bi") {
    plan.scores = block_influence(m, tokens, o.n_chunks, o.ctx, pool, o.progress, o.cancel);
    plan.order = order_by(plan.scores);
    return r;
  }
  PrefillKld measure(m, tokens, o.n_chunks, o.ctx, pool);
  const auto steps = static_cast<int64_t>(std::lround(o.max_fraction * static_cast<double>(n_layer)));
  const int64_t total = n_layer + steps * std::min(o.candidates, n_layer);
  auto evaluate = [&](const std::vector<uint8_t>& set) {
    check_cancel(o.cancel);
    const double k = measure.kld(set);
    ++r.evaluations;
    if (o.progress) o.progress("kld", std::min(r.evaluations, total), total);
    return k;
  };
  plan.scores.assign(static_cast<size_t>(n_layer), 0.0f);
  for (int64_t il = 0; il < n_layer; ++il) {
    std::vector<uint8_t> set(static_cast<size_t>(n_layer), 0);
    set[il] = 1;
    plan.scores[il] = static_cast<float>(evaluate(set));
  }
  const std::vector<int32_t> by_single = order_by(plan.scores);
  std::vector<uint8_t> chosen(static_cast<size_t>(n_layer), 0);
  for (int64_t step = 0; step < steps; ++step) {
    int32_t best = -1;
    double best_kld = 0;
    int64_t tried = 0;
    for (const int32_t il : by_single) {
      if (chosen[il] || tried == o.candidates) continue;
      ++tried;
      std::vector<uint8_t> set = chosen;
      set[il] = 1;
      const double k = evaluate(set);
      if (best < 0 || k < best_kld) {
        best = il;
        best_kld = k;
      }
    }
    chosen[best] = 1;
    plan.order.push_back(best);
    r.greedy_kld.push_back(best_kld);
  }
  for (const int32_t il : by_single) {
    if (!chosen[il]) plan.order.push_back(il);
  }
  if (o.progress) o.progress("kld", total, total);
  return r;
}

void write_prefill_plan(const gguf::File& src, const sparsity::PrefillPlan& plan,
                        const std::string& out_path, const std::atomic<bool>* cancel) {
  write_with_metadata(src, sparsity::PrefillPlan::is_key, [&](gguf::Writer& w) { plan.write(w); },
                      out_path, cancel);
}

}  // namespace squeeze::compress
