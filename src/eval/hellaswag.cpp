#include "eval/hellaswag.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/timer.h"

namespace squeeze::eval {

std::vector<HellaswagTask> parse_hellaswag(std::string_view text) {
  // std::getline on '\n', as llama-perplexity splits its prompt: a trailing '\n' ends the last
  // line, it does not start an empty one.
  std::vector<std::string_view> lines;
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    const size_t end = nl == std::string_view::npos ? text.size() : nl;
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  if (lines.empty()) throw UsageError("the HellaSwag file holds no task");
  if (lines.size() % 6 != 0) {
    throw UsageError("the HellaSwag file has " + std::to_string(lines.size()) +
                     " lines, not a multiple of 6 (context, gold index, four endings a task)");
  }
  std::vector<HellaswagTask> tasks(lines.size() / 6);
  for (size_t i = 0; i < tasks.size(); ++i) {
    HellaswagTask& t = tasks[i];
    t.context = lines[6 * i];
    const std::string_view gold = lines[6 * i + 1];
    if (gold.size() != 1 || gold[0] < '0' || gold[0] > '3') {
      throw UsageError("line " + std::to_string(6 * i + 2) + " of the HellaSwag file (task " +
                       std::to_string(i) + "'s gold ending) is '" +
                       std::string(gold.substr(0, 40)) + "', not 0, 1, 2 or 3");
    }
    t.gold = gold[0] - '0';
    for (int j = 0; j < 4; ++j) t.endings[j] = lines[6 * i + 2 + j];
  }
  return tasks;
}

std::vector<HellaswagTask> read_hellaswag(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot open HellaSwag file " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw UsageError("cannot read HellaSwag file " + path);
  return parse_hellaswag(ss.str());
}

uint32_t draw_below(std::mt19937& rng, uint64_t range) {
  if (range == 0 || range > (uint64_t{1} << 32)) {
    throw UsageError("internal: draw_below range " + std::to_string(range));
  }
  if (range == (uint64_t{1} << 32)) return static_cast<uint32_t>(rng());  // the engine's range
  const auto r = static_cast<uint32_t>(range);
  uint64_t product = uint64_t{static_cast<uint32_t>(rng())} * r;
  auto low = static_cast<uint32_t>(product);
  if (low < r) {
    const uint32_t threshold = (0u - r) % r;
    while (low < threshold) {
      product = uint64_t{static_cast<uint32_t>(rng())} * r;
      low = static_cast<uint32_t>(product);
    }
  }
  return static_cast<uint32_t>(product >> 32);
}

std::vector<size_t> hellaswag_task_order(size_t n_tasks, size_t n, TaskOrder order) {
  if (n > n_tasks) throw UsageError("internal: more tasks asked than the file holds");
  std::vector<size_t> out(n);
  if (order == TaskOrder::File) {
    for (size_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  // llama-perplexity: idx = uniform over the tasks left, then that task is erased.
  std::vector<size_t> left(n_tasks);
  for (size_t i = 0; i < n_tasks; ++i) left[i] = i;
  std::mt19937 rng(1);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t idx = draw_below(rng, left.size());
    out[i] = left[idx];
    left.erase(left.begin() + idx);
  }
  return out;
}

size_t HellaswagTokens::longest() const {
  size_t m = 0;
  for (const auto& s : seq) m = std::max(m, s.size());
  return m;
}

size_t HellaswagTokens::n_evaluated() const {
  size_t n = common_prefix;
  for (const auto& s : seq) n += s.size() - 1 - common_prefix;
  return n;
}

HellaswagTokens tokenize_task(const tokenizer::Tokenizer& tok, const HellaswagTask& task) {
  HellaswagTokens t;
  size_t shortest = SIZE_MAX;
  for (int j = 0; j < 4; ++j) {
    t.seq[j] = tok.encode(task.context + " " + task.endings[j], /*add_special=*/true,
                          /*parse_special=*/false);
    shortest = std::min(shortest, t.seq[j].size());
  }
  // Every ending keeps at least one token to score.
  const size_t cap = shortest - 1;
  while (t.common_prefix < cap) {
    const int32_t x = t.seq[0][t.common_prefix];
    if (t.seq[1][t.common_prefix] != x || t.seq[2][t.common_prefix] != x ||
        t.seq[3][t.common_prefix] != x) {
      break;
    }
    ++t.common_prefix;
  }
  if (t.common_prefix == 0) {
    throw UsageError("a HellaSwag task's four sequences share no token (context '" +
                     task.context.substr(0, 40) + "'); llama-perplexity's scoring needs one");
  }
  return t;
}

double first_token_log_prob(const float* logits, int64_t n_vocab, int32_t target) {
  float max_logit = logits[0];
  for (int64_t i = 0; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum_exp = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);  // expf
  const auto p = static_cast<float>(std::exp(logits[target] - max_logit) / sum_exp);
  return std::log(p);  // float log, as llama's std::log(first_probs[...])
}

float token_log_prob(const float* logits, int64_t n_vocab, int32_t target) {
  float max_logit = logits[0];
  for (int64_t i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  float sum_p = 0.0f;
  for (int64_t i = 0; i < n_vocab; ++i) sum_p += std::exp(logits[i] - max_logit);  // expf
  return logits[target] - max_logit - std::log(sum_p);
}

HellaswagScore score_task(model::Context& ctx, ThreadPool& pool, const HellaswagTokens& t) {
  const int64_t n_vocab = ctx.model().hparams().n_vocab;
  const size_t cp = t.common_prefix;
  if (cp == 0 || static_cast<int64_t>(t.longest()) > ctx.n_ctx()) {
    throw UsageError("internal: task needs " + std::to_string(t.longest()) +
                     " tokens of context; the context holds " + std::to_string(ctx.n_ctx()));
  }
  ctx.reset();
  const std::span<const int32_t> prefix(t.seq[0].data(), cp);
  // [n_vocab]: the logits of the prefix's last token, which predict each ending's first token.
  const std::vector<float> prefix_logits = [&] {
    const std::span<const float> l = ctx.decode(prefix);
    return std::vector<float>(l.begin(), l.end());
  }();
  HellaswagScore score;
  std::vector<float> lp;
  for (int s = 0; s < 4; ++s) {
    const std::vector<int32_t>& seq = t.seq[s];
    double sum = first_token_log_prob(prefix_logits.data(), n_vocab, seq[cp]);
    // Tokens cp .. size-2 run; row j predicts seq[cp + 1 + j].
    const int64_t n_run = static_cast<int64_t>(seq.size() - 1 - cp);
    if (n_run > 0) {
      ctx.truncate(static_cast<int64_t>(cp));
      const std::span<const float> logits =
          ctx.decode(std::span<const int32_t>(seq.data() + cp, n_run), /*all_logits=*/true);
      lp.resize(n_run);
      pool.parallel_for(n_run, 1, [&](int64_t j0, int64_t j1, int) {
        for (int64_t j = j0; j < j1; ++j) {
          lp[j] = token_log_prob(logits.data() + j * n_vocab, n_vocab, seq[cp + 1 + j]);
        }
      });
      for (int64_t j = 0; j < n_run; ++j) sum += lp[j];
    }
    score.log_prob[s] = sum / static_cast<double>(n_run + 1);
  }
  for (int s = 1; s < 4; ++s) {
    if (score.log_prob[s] > score.log_prob[score.chosen]) score.chosen = s;
  }
  return score;
}

double AccuracyStats::std_error() const {
  if (n < 2) return 0.0;
  const double p = acc();
  return std::sqrt(p * (1 - p) / static_cast<double>(n - 1));
}

// llama-perplexity's Wilson score interval, za = 1.95996398454.
namespace {
std::pair<double, double> wilson(double freq, int64_t n) {
  const double za = 1.95996398454;
  const double z = za * za / static_cast<double>(n);
  const double cnf = z * std::sqrt(static_cast<double>(n) * (4.0 * freq * (1 - freq) + z)) /
                     (za + za);
  return {(freq + z * 0.5 - cnf) / (1.0 + z), (freq + z * 0.5 + cnf) / (1.0 + z)};
}
}  // namespace

double AccuracyStats::wilson_low() const { return n ? wilson(acc(), n).first : 0.0; }
double AccuracyStats::wilson_high() const { return n ? wilson(acc(), n).second : 0.0; }

HellaswagResult run_hellaswag(model::Context& ctx, ThreadPool& pool,
                              const std::vector<HellaswagTask>& tasks,
                              const std::vector<size_t>& order,
                              const std::vector<HellaswagTokens>& tokens,
                              const HellaswagOptions& opt) {
  if (order.size() != tokens.size()) throw UsageError("internal: order and tokens differ");
  HellaswagResult res;
  res.tasks.reserve(order.size());
  const auto total = static_cast<int64_t>(order.size());
  const Timer timer;
  for (size_t i = 0; i < order.size(); ++i) {
    if (opt.interrupted && opt.interrupted()) {
      throw Error("interrupted after " + std::to_string(i) + " of " + std::to_string(total) +
                  " tasks");
    }
    HellaswagTaskResult r;
    r.task = order[i];
    r.gold = tasks.at(order[i]).gold;
    r.score = score_task(ctx, pool, tokens[i]);
    res.n_tokens += static_cast<int64_t>(tokens[i].n_evaluated());
    res.acc.n += 1;
    res.acc.n_correct += r.correct() ? 1 : 0;
    res.tasks.push_back(r);
    if (opt.on_task) opt.on_task(static_cast<int64_t>(i + 1), total, r, res.acc);
  }
  res.seconds = timer.seconds();
  return res;
}

}  // namespace squeeze::eval
