#include "serve/engine.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace squeeze::serve {

using Clock = std::chrono::steady_clock;

// What the choices of one request share.
struct Engine::Request {
  std::shared_ptr<RequestStream> out;
  GenParams params;
  RequestUsage usage;
  int32_t open = 0;  // choices not finished
  Clock::time_point arrived;
  bool first_token = false;
};

struct Engine::Seq : Sequence {
  Seq(std::shared_ptr<Request> r, int32_t choice, const tokenizer::Tokenizer& tok, int32_t n_vocab)
      : req(std::move(r)),
        choice(choice),
        sampler(seeded(req->params.sampling, choice), n_vocab),
        decoder(tok) {}
  static sample::SamplerParams seeded(sample::SamplerParams p, int32_t choice) {
    p.seed += static_cast<uint64_t>(choice);
    return p;
  }
  std::shared_ptr<Request> req;
  int32_t choice;
  sample::Sampler sampler;
  tokenizer::StreamDecoder decoder;
  int64_t n_generated = 0;
  std::string pending;            // text not sent yet (it may start a stop string)
  std::vector<TokenInfo> held;    // the tokens of that text and after
  Clock::time_point last_token;
  bool done = false;
};

namespace {

// The log-probability of token id under the logits, and the top n tokens' (most likely first).
TokenInfo token_info(std::span<const float> logits, int32_t id, int32_t n_top) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x - mx));
  const auto lse = static_cast<float>(mx + std::log(sum));
  TokenInfo info;
  info.id = id;
  info.logprob = logits[static_cast<size_t>(id)] - lse;
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  const auto k = std::min<size_t>(static_cast<size_t>(n_top), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int32_t a, int32_t b) {
                      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
                    });
  for (size_t i = 0; i < k; ++i) info.top.emplace_back(order[i], logits[order[i]] - lse);
  return info;
}

}  // namespace

Engine::Engine(const model::Model& m, const tokenizer::Tokenizer& tok, ThreadPool& pool,
               const EngineConfig& c)
    : model_(m),
      tok_(tok),
      config_(c),
      ctx_(m, c.n_ctx, pool, std::max<int64_t>(c.batch_tokens, 1), std::max<int64_t>(c.parallel, 1),
           c.kv_tokens, c.kv),
      sched_(ctx_.kv_mut(), {c.batch_tokens, std::max<int64_t>(c.max_queue, 1) + c.parallel, c.prefix_cache}),
      split_(c.split) {
  if (c.parallel < 1 || c.batch_tokens < 1 || c.max_queue < 1) {
    throw UsageError("--parallel, --batch-tokens and the queue must be at least 1");
  }
  if (ctx_.kv().capacity() < c.n_ctx) {
    throw UsageError("--kv-tokens " + std::to_string(c.kv_tokens) +
                     " cannot hold one sequence of the context size " + std::to_string(c.n_ctx));
  }
  metrics_.kv_blocks_total = ctx_.kv().n_blocks();
}

Engine::~Engine() = default;

std::shared_ptr<RequestStream> Engine::submit(std::vector<int32_t> prompt, const GenParams& p) {
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt == 0) throw UsageError("the prompt is empty");
  if (n_prompt >= config_.n_ctx) {
    throw UsageError("the prompt has " + std::to_string(n_prompt) + " tokens; the context holds " +
                     std::to_string(config_.n_ctx) + " with at least one to generate");
  }
  if (p.n < 1 || p.n > config_.parallel) {
    throw UsageError("n = " + std::to_string(p.n) + " choices; this server runs at most " +
                     std::to_string(config_.parallel) + " sequences at once");
  }
  for (const int32_t t : prompt) {
    if (t < 0 || t >= tok_.n_vocab()) {
      throw UsageError("prompt token " + std::to_string(t) + " is outside the vocabulary");
    }
  }
  sample::validate(p.sampling);
  auto req = std::make_shared<Request>();
  req->out = std::make_shared<RequestStream>(p.n);
  req->params = p;
  req->open = p.n;
  req->arrived = Clock::now();
  req->usage.prompt_tokens = n_prompt;
  const auto n_vocab = static_cast<int32_t>(model_.hparams().n_vocab);
  auto first = std::make_shared<Seq>(req, 0, tok_, n_vocab);
  first->tokens = std::move(prompt);
  first->n_prompt = n_prompt;
  for (int32_t i = 1; i < p.n; ++i) first->forks.push_back(std::make_shared<Seq>(req, i, tok_, n_vocab));
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queued_ >= config_.max_queue) return nullptr;
    ++queued_;
    incoming_.push_back(std::move(first));
  }
  cv_.notify_all();
  return req->out;
}

void Engine::take_incoming() {
  std::vector<std::shared_ptr<Seq>> taken;
  bool cancel_all = false;
  {
    std::lock_guard lock(mu_);
    taken.swap(incoming_);
    cancel_all = cancel_all_;
  }
  for (auto& s : taken) {
    for (const int32_t t : s->tokens) {
      s->sampler.accept(t);
      for (const auto& f : s->forks) static_cast<Seq&>(*f).sampler.accept(t);
    }
    live_.push_back(s);
    for (const auto& f : s->forks) live_.push_back(std::static_pointer_cast<Seq>(f));
    sched_.enqueue(s);  // the queue's bound was checked in submit()
  }
  for (const auto& s : live_) {
    if (s->req->out->cancelled() || cancel_all) s->cancelled = true;
  }
}

bool Engine::step() {
  take_incoming();
  Plan plan = sched_.schedule();
  for (const auto& d : plan.dropped) {
    for (const auto& f : d->forks) finish(static_cast<Seq&>(*f), Finish::Cancelled);
    finish(static_cast<Seq&>(*d), Finish::Cancelled);
  }
  bool split = false;
  if (!plan.items.empty()) {
    // Under activation sparsity a step's few decodes may run faster as one-token passes
    // (split_policy.h), prompt chunks as a batch of their own; each sequence then gets the
    // one-token path's results, as alone.
    std::vector<PlanItem> decodes, chunks;
    for (const PlanItem& it : plan.items) (it.n == 1 && it.logits ? decodes : chunks).push_back(it);
    const auto n_decodes = static_cast<int64_t>(decodes.size());
    const bool sparse = ctx_.act_sparsity() != nullptr;
    split = sparse && split_.split(n_decodes);
    const Clock::time_point t0 = Clock::now();
    if (split) {
      for (const PlanItem& it : decodes) run_items({&it, 1});
      if (!chunks.empty()) run_items(chunks);
    } else {
      run_items(plan.items);
    }
    if (sparse && chunks.empty()) {
      split_.record(n_decodes, split, std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  std::erase_if(live_, [](const std::shared_ptr<Seq>& s) { return s->done; });
  std::lock_guard lock(mu_);
  metrics_.steps += plan.items.empty() ? 0 : 1;
  metrics_.split_steps += split ? 1 : 0;
  metrics_.preemptions += plan.n_preempted;
  metrics_.running = sched_.n_running();
  metrics_.waiting = sched_.n_waiting();
  metrics_.kv_blocks_used = ctx_.kv().blocks().n_used();
  metrics_.kv_blocks_cached_idle = ctx_.kv().blocks().n_cached_idle();
  metrics_.kv_bytes = static_cast<int64_t>(ctx_.kv().bytes());
  metrics_.kv_bytes_peak = std::max(metrics_.kv_bytes_peak, metrics_.kv_bytes);
  queued_ = static_cast<int64_t>(incoming_.size()) + sched_.n_waiting();
  return !plan.items.empty() || !plan.dropped.empty();
}

void Engine::run_items(std::span<const PlanItem> items) {
  model::Batch b;
  for (const PlanItem& it : items) {
    const Sequence& s = *it.seq;
    for (int64_t i = 0; i < it.n; ++i) {
      const int64_t p = s.n_computed + i;
      b.add(s.tokens[p], static_cast<int32_t>(p), s.slot, it.logits && i == it.n - 1);
    }
  }
  const std::span<const float> logits = ctx_.decode_batch(b);
  const auto n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  for (const PlanItem& it : items) it.seq->n_computed += it.n;
  size_t row = 0;
  for (const PlanItem& it : items) {
    if (!it.logits) continue;
    const auto l = logits.subspan(row++ * n_vocab, n_vocab);
    auto& s = static_cast<Seq&>(*it.seq);
    const std::vector<std::shared_ptr<Sequence>> forks = sched_.fork(s);
    sample(s, l);
    for (const auto& f : forks) sample(static_cast<Seq&>(*f), l);
  }
}

void Engine::sample(Seq& s, std::span<const float> logits) {
  const Clock::time_point now = Clock::now();
  Request& r = *s.req;
  if (!r.first_token) {
    r.first_token = true;
    r.usage.cached_tokens = s.n_cached;
    std::lock_guard lock(mu_);
    metrics_.prompt_tokens += s.n_prompt;
    metrics_.cached_tokens += s.n_cached;
    metrics_.time_to_first_token.observe(std::chrono::duration<double>(now - r.arrived).count());
  } else if (s.n_generated > 0) {
    std::lock_guard lock(mu_);
    metrics_.inter_token_latency.observe(std::chrono::duration<double>(now - s.last_token).count());
  }
  s.last_token = now;
  const int32_t id = s.sampler.sample(logits);
  if (tok_.is_eog(id)) {
    finish(s, Finish::Stop);
    return;
  }
  s.sampler.accept(id);
  s.tokens.push_back(id);
  ++s.n_generated;
  ++r.usage.completion_tokens;
  {
    std::lock_guard lock(mu_);
    ++metrics_.generated_tokens;
  }
  if (r.params.logprobs >= 0) s.held.push_back(token_info(logits, id, r.params.logprobs));
  s.pending += s.decoder.push(id);
  if (emit(s)) {
    finish(s, Finish::Stop);  // a stop string
  } else if (r.params.max_tokens >= 0 && s.n_generated >= r.params.max_tokens) {
    finish(s, Finish::Length);
  } else if (static_cast<int64_t>(s.tokens.size()) >= config_.n_ctx) {
    finish(s, Finish::Length);
  }
}

bool Engine::emit(Seq& s) {
  const std::vector<std::string>& stops = s.req->params.stop;
  // The earliest stop string in the pending text ends the choice there.
  size_t cut = std::string::npos;
  for (const std::string& st : stops) {
    if (!st.empty()) cut = std::min(cut, s.pending.find(st));
  }
  size_t send = s.pending.size();
  if (cut != std::string::npos) {
    send = cut;
  } else {
    // Hold back the longest tail that could begin a stop string.
    for (const std::string& st : stops) {
      if (st.empty()) continue;
      for (size_t k = std::min(st.size() - 1, s.pending.size()); k > 0; --k) {
        if (s.pending.compare(s.pending.size() - k, k, st, 0, k) == 0) {
          send = std::min(send, s.pending.size() - k);
          break;
        }
      }
    }
  }
  if (send > 0 || (cut != std::string::npos && !s.held.empty())) {
    Event e;
    e.choice = s.choice;
    e.text = s.pending.substr(0, send);
    e.tokens = std::move(s.held);
    s.held.clear();
    s.req->out->push(std::move(e));
  }
  // A stop string and whatever follows it are never sent.
  s.pending.erase(0, cut != std::string::npos ? s.pending.size() : send);
  return cut != std::string::npos;
}

void Engine::finish(Seq& s, Finish reason) {
  if (s.done) return;
  s.done = true;
  if (reason != Finish::Cancelled) {
    s.pending += s.decoder.flush();
    if (emit(s)) reason = Finish::Stop;
  }
  sched_.finish(s);
  Request& r = *s.req;
  Event e;
  e.choice = s.choice;
  if (reason != Finish::Cancelled && !s.pending.empty()) e.text = std::move(s.pending);
  e.tokens = std::move(s.held);
  e.finish = reason;
  if (--r.open == 0) r.out->set_usage(r.usage);
  r.out->push(std::move(e));
}

void Engine::run() {
  for (;;) {
    if (step()) continue;
    std::unique_lock lock(mu_);
    if (stopping_ && incoming_.empty() && sched_.idle()) return;
    cv_.wait_for(lock, std::chrono::milliseconds(20),
                 [&] { return !incoming_.empty() || stopping_; });
  }
}

void Engine::stop(bool cancel) {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cancel_all_ = cancel_all_ || cancel;
  }
  cv_.notify_all();
}

EngineMetrics Engine::metrics() const {
  std::lock_guard lock(mu_);
  return metrics_;
}

}  // namespace squeeze::serve
