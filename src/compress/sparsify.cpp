#include "compress/sparsify.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "compress/output.h"
#include "calib/calib.h"
#include "core/error.h"
#include "model/names.h"
#include "model/act_sparsity.h"
#include "model/context.h"
#include "model/forward.h"
#include "ops/norm.h"
#include "sparsity/histogram.h"

namespace squeeze::compress {

namespace {

using sparsity::Method;

// The site a named intermediate feeds, or -1.
int site_of(Method method, std::string_view name) {
  namespace names = model::names;
  if (method != Method::Teal) return name == names::kFfnGate ? sparsity::kGateAct : -1;
  if (name == names::kAttnNorm) return sparsity::kAttnIn;
  if (name == names::kKqvOut) return sparsity::kAttnOut;
  if (name == names::kFfnNorm) return sparsity::kFfnIn;
  if (name == names::kFfnAct) return sparsity::kFfnAct;
  return -1;
}

// TEAL's block-wise greedy allocation (Liu et al. 2024; their teal/greedyopt.py): for each
// block, on the dense model's inputs to it, start dense and repeatedly raise the sparsity of the
// one site whose step least increases the L2 error of the block's output, each step adding
// opts.greedy_step to the block's sparsity weighted by weights (so a small site moves further
// per step); the sites' sparsities at each block level give the allocation, linear between
// steps. The error is taken, as TEAL does, over the last quarter of each window's positions
// (the long contexts decoding sees), on the first opts.greedy_samples calibration windows.
// Cost: about 4 / step block runs of greedy_samples windows per block.
constexpr double kGreedyScoredFraction = 0.25;
constexpr double kMaxSiteSparsity = 0.99;

using Alloc = std::array<double, sparsity::kTealSites>;

std::vector<double> greedy_allocation(const model::Model& m, const calib::CalibSamples& calib,
                                      const sparsity::AbsHistogram* hist,
                                      const sparsity::ThresholdTable& t,
                                      const SparsifyOptions& opts, ThreadPool& pool,
                                      const Interrupted& interrupted) {
  constexpr int kSites = sparsity::kTealSites;
  const model::HParams& hp = m.hparams();
  const int64_t ctx = opts.ctx, n_embd = hp.n_embd;
  const int64_t n_win =
      std::min<int64_t>(opts.greedy_samples, static_cast<int64_t>(calib.samples.size()));
  const size_t win = static_cast<size_t>(ctx * n_embd);
  // Each site's share of a block's weights (weighted_density of a one-hot density).
  Alloc share{};
  for (int s = 0; s < kSites; ++s) {
    std::array<double, kSites> one{};
    one[s] = 1.0;
    share[s] = model::weighted_density(m, Method::Teal, one);
  }
  auto block_sparsity = [&](const Alloc& p) {
    double b = 0;
    for (int s = 0; s < kSites; ++s) b += share[s] * p[s];
    return b;
  };
  std::vector<float> x(static_cast<size_t>(n_win) * win), y(x.size());
  for (int64_t g = 0; g < n_win; ++g) model::embed(m, calib.samples[g], x.data() + g * win);
  kv::KvCache kv = model::make_kv_cache(hp, ctx);
  model::ForwardScratch fs(hp, ctx);
  model::ActSparsity policy(m, t, 0.0, pool, std::nullopt, /*column_layouts=*/false);
  const int64_t p0 = ctx - std::max<int64_t>(1, std::llround(kGreedyScoredFraction * ctx));
  // Runs block il on every window (into y when dense), returns the squared error against y.
  auto run = [&](int64_t il, const model::ActSparsity* sp) {
    double err = 0;
    for (int64_t g = 0; g < n_win; ++g) {
      std::copy(x.data() + g * win, x.data() + (g + 1) * win, fs.x.data());
      fs.sparsity = sp;
      model::forward_layer(m, il, kv, fs, pool, ctx, 0, nullptr);
      fs.sparsity = nullptr;
      float* yg = y.data() + g * win;
      if (sp == nullptr) {
        std::copy(fs.x.data(), fs.x.data() + win, yg);
        continue;
      }
      for (int64_t i = p0 * n_embd; i < ctx * n_embd; ++i) {
        const double d = static_cast<double>(fs.x[i]) - yg[i];
        err += d * d;
      }
    }
    return err;
  };
  auto thresholds_of = [&](int64_t il, const Alloc& p) {
    std::array<float, kSites> th{};
    for (int s = 0; s < kSites; ++s) th[s] = hist[static_cast<size_t>(il) * kSites + s].quantile(p[s]);
    return th;
  };
  const size_t n_levels = t.levels.size();
  std::vector<double> alloc(static_cast<size_t>(hp.n_layer) * kSites * n_levels, 0.0);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (cancelled(opts.cancel)) throw interrupted;
    run(il, nullptr);  // the dense outputs
    std::vector<Alloc> path{Alloc{}};
    std::vector<double> level{0.0};
    Alloc p{};
    double err = 0;
    for (;;) {
      const double b = block_sparsity(p);
      if (b >= kMaxSiteSparsity - 1e-9) break;
      const double step = std::min(opts.greedy_step, kMaxSiteSparsity - b);
      // The best site by error added per sparsity gained (the gains differ only where a site
      // reaches kMaxSiteSparsity).
      int best = -1;
      double best_rate = 0, best_err = 0;
      Alloc best_p{};
      for (int s = 0; s < kSites; ++s) {
        if (share[s] <= 0 || p[s] >= kMaxSiteSparsity - 1e-9) continue;
        Alloc q = p;
        q[s] = std::min(kMaxSiteSparsity, p[s] + step / share[s]);
        const double gain = block_sparsity(q) - b;
        if (cancelled(opts.cancel)) throw interrupted;
        policy.set_thresholds(il, thresholds_of(il, q));
        const double e = run(il, &policy);
        const double rate = (e - err) / gain;
        if (best < 0 || rate < best_rate) {
          best = s;
          best_rate = rate;
          best_err = e;
          best_p = q;
        }
      }
      if (best < 0) break;
      p = best_p;
      err = best_err;
      path.push_back(p);
      level.push_back(block_sparsity(p));
    }
    // The table's levels, linear between the steps (the last step's shares above it).
    for (size_t k = 0; k < n_levels; ++k) {
      const double L = t.levels[k];
      size_t j = 0;
      while (j + 1 < level.size() && level[j + 1] < L) ++j;
      Alloc a = path[j];
      if (j + 1 < level.size()) {
        const double f = std::clamp((L - level[j]) / (level[j + 1] - level[j]), 0.0, 1.0);
        for (int s = 0; s < kSites; ++s) a[s] = path[j][s] + f * (path[j + 1][s] - path[j][s]);
      }
      for (int s = 0; s < kSites; ++s) {
        alloc[(static_cast<size_t>(il) * kSites + s) * n_levels + k] = a[s];
      }
    }
    x.swap(y);  // the next block's inputs: this one's dense outputs
    if (opts.progress) opts.progress("greedy allocation", il + 1, hp.n_layer);
  }
  return alloc;
}

void check_options(const SparsifyOptions& o) {
  if (o.levels.empty()) throw UsageError("no --sparsity level given");
  for (size_t i = 0; i < o.levels.size(); ++i) {
    const double s = o.levels[i];
    if (!(s >= 0 && s <= 0.99)) throw UsageError("--sparsity levels must be within 0 .. 0.99");
    if (std::fabs(s * 100 - std::round(s * 100)) > 1e-6) {
      throw UsageError("--sparsity levels must be multiples of 0.01 (the table's levels)");
    }
    for (size_t j = 0; j < i; ++j) {
      if (std::round(o.levels[j] * 100) == std::round(s * 100)) {
        throw UsageError("--sparsity level " + std::to_string(s) + " given twice");
      }
    }
  }
  if (o.refine_passes < 0) throw UsageError("--refine-passes must not be negative");
  if (o.method == sparsity::Method::Relu && (o.levels.size() != 1 || o.levels[0] != 0.0)) {
    throw UsageError("relu has no thresholds: its one level is 0 (leave out --sparsity)");
  }
  if (o.n_samples <= 0 || o.heldout_samples <= 0) {
    throw UsageError("the numbers of calibration and held-back samples must be positive");
  }
  if (o.ctx < 2) throw UsageError("the calibration context must be at least 2 tokens");
  if (!(o.greedy_step > 0 && o.greedy_step <= 0.5)) {
    throw UsageError("--greedy-step must be within (0, 0.5]");
  }
  if (o.greedy_samples < 1) throw UsageError("--greedy-samples must be positive");
  if (o.greedy && o.method != Method::Teal) {
    throw UsageError("greedy allocation shares a level among TEAL's four sites of a block; " +
                     std::string(sparsity::method_name(o.method)) + " has one site a block");
  }
  if (!(o.calib_fraction > 0 && o.calib_fraction < 1)) {
    throw UsageError("the calibration fraction must be within (0, 1)");
  }
}

// One calibration: the model run on windows of tokens, with, while histograms are collected, a
// callback that adds what every site sees before its threshold to the site's histogram of
// |activation| (CATS: of |SiLU(gate)|), and for TEAL the output head's input (the last block's
// output through the final norm; the runs compute no logits, so the head itself never runs).
class SiteCalibration {
 public:
  SiteCalibration(const model::Model& m, const SparsifyOptions& opts, ThreadPool& pool)
      : m_(m),
        opts_(opts),
        sites_(sparsity::n_sites(opts.method)),
        hist_(std::make_unique<sparsity::AbsHistogram[]>(n_hist())),
        ctx_(m, opts.ctx, pool, opts.ctx) {}

  size_t n_hist() const { return static_cast<size_t>(m_.hparams().n_layer * sites_); }
  int sites() const { return sites_; }
  bool teal() const { return opts_.method == Method::Teal; }
  model::Context& context() { return ctx_; }
  int64_t sample_index() const { return sample_index_; }

  // Runs every window of `set` from an empty cache, reporting `stage`; throws Interrupted.
  void run(const calib::CalibSamples& set, const std::string& stage) {
    for (size_t i = 0; i < set.samples.size(); ++i) {
      if (cancelled(opts_.cancel)) throw Interrupted("interrupted; no output written");
      sample_index_ = static_cast<int64_t>(i);
      ctx_.reset();
      const auto& sample = set.samples[i];
      ctx_.decode_from(sample, static_cast<int64_t>(sample.size()));
      if (opts_.progress) {
        opts_.progress(stage, static_cast<int64_t>(i + 1), static_cast<int64_t>(set.samples.size()));
      }
    }
  }

  // From now on the runs add to the histograms (cleared first), until the callback is unset.
  void collect_histograms() {
    for (size_t h = 0; h < n_hist(); ++h) hist_[h] = sparsity::AbsHistogram();
    head_hist_ = sparsity::AbsHistogram();
    ctx_.set_callback([this](std::string_view name, int layer, const float* data, int64_t rows,
                             int64_t width) {
      if (is_last_output(name, layer)) head_hist_.add(head_input(data, rows), rows * width);
      const int site = site_of(opts_.method, name);
      if (site < 0 || layer < 0) return;
      sparsity::AbsHistogram& h = hist_[static_cast<size_t>(layer) * sites_ + site];
      if (opts_.method == Method::Cats) {  // the threshold applies to SiLU(gate)
        silu_.resize(static_cast<size_t>(rows * width));
        for (int64_t i = 0; i < rows * width; ++i) silu_[i] = model::silu_for_threshold(data[i]);
        h.add(silu_.data(), rows * width);
      } else {
        h.add(data, rows * width);
      }
    });
  }

  float quantile(int64_t il, int site, double q) const {
    return hist_[static_cast<size_t>(il) * sites_ + site].quantile(q);
  }
  float head_quantile(double q) const { return head_hist_.quantile(q); }
  const sparsity::AbsHistogram* histograms() const { return hist_.get(); }

  // TEAL: the last block's output, which the head reads through the final norm.
  bool is_last_output(std::string_view name, int layer) const {
    return teal() && name == model::names::kLOut && layer == m_.hparams().n_layer - 1;
  }
  // rows of data through the final norm (the head's input).
  const float* head_input(const float* data, int64_t rows) {
    const model::HParams& hp = m_.hparams();
    normed_.resize(static_cast<size_t>(rows * hp.n_embd));
    for (int64_t r = 0; r < rows; ++r) {
      ops::rms_norm(data + r * hp.n_embd, m_.output_norm, hp.n_embd, hp.rms_eps,
                    normed_.data() + r * hp.n_embd);
    }
    return normed_.data();
  }

 private:
  const model::Model& m_;
  const SparsifyOptions& opts_;
  int sites_;
  std::unique_ptr<sparsity::AbsHistogram[]> hist_;
  sparsity::AbsHistogram head_hist_;
  model::Context ctx_;
  int64_t sample_index_ = 0;  // the window being run
  std::vector<float> silu_, normed_;
};

// The levels that were not refined get the correction of their refined neighbours (ascending
// level indices): the ratio refined / dense interpolated linearly in the level (1 at level 0,
// the last ratio above the last refined level), so the table stays one consistent, increasing
// family of thresholds. dense / dense_head: the thresholds before refinement.
void correct_unrefined_levels(sparsity::ThresholdTable& t, const std::vector<float>& dense,
                              const std::vector<float>& dense_head,
                              const std::vector<size_t>& refined, bool teal) {
  if (refined.empty()) return;
  auto is_refined = [&](size_t k) { return std::binary_search(refined.begin(), refined.end(), k); };
  const size_t n_levels = t.levels.size();
  // One row of thresholds over the levels: its dense-model values and its refined ones.
  auto interpolate = [&](const float* dense_row, float* row) {
    auto ratio = [&](size_t k) { return dense_row[k] > 0 ? row[k] / dense_row[k] : 1.0f; };
    for (size_t k = 1; k < n_levels; ++k) {
      if (is_refined(k)) continue;
      const auto hi = std::lower_bound(refined.begin(), refined.end(), k);
      float f;
      if (hi == refined.end()) {
        f = ratio(refined.back());
      } else {
        const size_t k1 = *hi;
        const size_t k0 = hi == refined.begin() ? 0 : *(hi - 1);
        const float r0 = k0 == 0 ? 1.0f : ratio(k0), r1 = ratio(k1);
        const float w = static_cast<float>(k - k0) / static_cast<float>(k1 - k0);
        f = r0 + w * (r1 - r0);
      }
      row[k] = dense_row[k] * f;
    }
  };
  // Thresholds must not fall as the level rises. With greedy shares a site's dense threshold
  // can stay flat over a run of levels (its share did not move) while the correction ratio
  // varies across it, so the interpolated row can dip: levels below a refined one are capped
  // by the next level up, then levels above are raised to the one below (refined values stay
  // as they are).
  auto monotone = [&](float* row) {
    for (size_t k = n_levels - 1; k-- > 0;) {
      if (!is_refined(k)) row[k] = std::min(row[k], row[k + 1]);
    }
    for (size_t k = 1; k < n_levels; ++k) {
      if (!is_refined(k)) row[k] = std::max(row[k], row[k - 1]);
    }
  };
  for (size_t at = 0; at < t.thresholds.size(); at += n_levels) {
    interpolate(dense.data() + at, t.thresholds.data() + at);
    monotone(t.thresholds.data() + at);
  }
  if (teal) interpolate(dense_head.data(), t.head.data());
}

// The table: dense-model quantiles for every level (each site at the level, or at its greedy
// share), then each asked level refined from runs sparsified at that level, the others
// corrected by their refined neighbours. Fills r.table and r.allocation.
void calibrate_levels(const model::Model& m, SiteCalibration& c, const calib::CalibSamples& calib,
                      const SparsifyOptions& opts, ThreadPool& pool, SparsifyResult& r) {
  const model::HParams& hp = m.hparams();
  const int sites = c.sites();
  sparsity::ThresholdTable& t = r.table;
  std::vector<double>& allocation = r.allocation;  // greedy: [(layer * sites + site) * levels + level]
  t.method = opts.method;
  t.n_layer = hp.n_layer;
  t.levels = sparsity::standard_levels();
  t.default_level = static_cast<float>(std::round(opts.levels[0] * 100) / 100);
  t.thresholds.resize(c.n_hist() * t.levels.size());
  auto target = [&](int64_t il, int s, size_t k) {
    return allocation.empty()
               ? static_cast<double>(t.levels[k])
               : allocation[(static_cast<size_t>(il) * sites + s) * t.levels.size() + k];
  };
  // Level k's thresholds from the histograms, each site at its target sparsity.
  auto set_level = [&](size_t k) {
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      for (int s = 0; s < sites; ++s) t.at(il, s, k) = c.quantile(il, s, target(il, s, k));
    }
  };

  c.collect_histograms();
  c.run(calib, "calibrating");
  for (size_t k = 0; k < t.levels.size(); ++k) set_level(k);
  if (opts.greedy) {
    allocation = greedy_allocation(m, calib, c.histograms(), t, opts, pool,
                                   Interrupted("interrupted; no output written"));
    for (size_t k = 0; k < t.levels.size(); ++k) set_level(k);
  }
  if (c.teal()) {
    t.head.resize(t.levels.size());
    for (size_t k = 0; k < t.levels.size(); ++k) t.head[k] = c.head_quantile(t.levels[k]);
  }

  // Refinement: each asked level's thresholds from a run sparsified at that level.
  const std::vector<float> dense = t.thresholds, dense_head = t.head;
  std::vector<size_t> refined;
  for (const double level : opts.levels) {
    const size_t k = t.level_index(level);
    for (int pass = 0; pass < opts.refine_passes && t.levels[k] > 0; ++pass) {
      c.collect_histograms();
      const model::ActSparsity policy(m, t, t.levels[k], pool, std::nullopt,
                                      /*column_layouts=*/false);
      c.context().set_act_sparsity(&policy);
      char stage[64];
      std::snprintf(stage, sizeof stage, "refining %.2f", t.levels[k]);
      c.run(calib, stage);
      c.context().set_act_sparsity(nullptr);
      set_level(k);
      if (c.teal()) t.head[k] = c.head_quantile(t.levels[k]);
    }
    if (opts.refine_passes > 0 && t.levels[k] > 0) refined.push_back(k);
  }
  c.context().set_callback(nullptr);
  std::sort(refined.begin(), refined.end());
  correct_unrefined_levels(t, dense, dense_head, refined, c.teal());
}

// Which activations each held-back token keeps at the default level, per (layer, site): bit
// masks [token][words] over the site's width.
struct KeptMasks {
  std::vector<std::vector<uint64_t>> bits;
  std::vector<int64_t> widths;  // 0 where nothing was seen
};

// The density the thresholds reach on text they never saw, all sites sparsified at once, at
// every asked level (r.heldout_*); at the default level also the kept masks.
KeptMasks check_heldout(const model::Model& m, SiteCalibration& c, const calib::CalibSamples& held,
                        const SparsifyOptions& opts, ThreadPool& pool, SparsifyResult& r) {
  const sparsity::ThresholdTable& t = r.table;
  const Method method = opts.method;
  const int64_t n_held = opts.heldout_samples * opts.ctx;
  KeptMasks masks;
  masks.bits.resize(c.n_hist());
  masks.widths.assign(c.n_hist(), 0);
  model::Context& ctx = c.context();
  for (size_t li = 0; li < opts.levels.size(); ++li) {
    const model::ActSparsity policy(m, t, opts.levels[li], pool, std::nullopt,
                                    /*column_layouts=*/false);
    const float head_t = c.teal() ? t.head[t.level_index(opts.levels[li])] : 0.0f;
    uint64_t head_kept = 0, head_seen = 0;
    ctx.set_callback([&](std::string_view name, int layer, const float* data, int64_t rows,
                         int64_t width) {
      if (c.is_last_output(name, layer)) {
        const float* x = c.head_input(data, rows);
        for (int64_t i = 0; i < rows * width; ++i) head_kept += !(std::fabs(x[i]) < head_t);
        head_seen += static_cast<uint64_t>(rows * width);
      }
      if (li != 0) return;
      const int site = site_of(method, name);
      if (site < 0 || layer < 0) return;
      const size_t h = static_cast<size_t>(layer) * c.sites() + site;
      const int64_t words = (width + 63) / 64;
      if (masks.widths[h] == 0) {
        masks.widths[h] = width;
        masks.bits[h].assign(static_cast<size_t>(n_held * words), 0);
      }
      // The run-time rule: |x| >= t (TEAL), the gate-space cut (CATS, ReLU).
      const model::SparseLayer& S = policy.layer(layer);
      const float th = S.thresholds[site];
      for (int64_t p = 0; p < rows; ++p) {
        uint64_t* bits = masks.bits[h].data() + (c.sample_index() * opts.ctx + p) * words;
        for (int64_t i = 0; i < width; ++i) {
          const float v = data[p * width + i];
          const bool kept = method == Method::Teal ? !(std::fabs(v) < th) : S.keep_gate(v);
          if (kept) bits[i / 64] |= uint64_t{1} << (i % 64);
        }
      }
    });
    ctx.set_act_sparsity(&policy);
    ctx.reset_sparsity_counters();
    char stage[64];
    std::snprintf(stage, sizeof stage, "held-back check %.2f", policy.level());
    c.run(held, stage);
    ctx.set_callback(nullptr);
    ctx.set_act_sparsity(nullptr);
    const model::SparsityCounters& counters = ctx.sparsity_counters();
    std::array<double, sparsity::kTealSites> d{};
    for (int s = 0; s < c.sites(); ++s) d[s] = counters.density(s);
    r.heldout_density.push_back(d);
    r.heldout_weighted_density.push_back(counters.weighted_density(m, method));
    if (c.teal()) {
      r.heldout_head_density.push_back(static_cast<double>(head_kept) /
                                       static_cast<double>(std::max<uint64_t>(head_seen, 1)));
    }
  }
  r.heldout_tokens = n_held;
  return masks;
}

// Union density over batches of b tokens (r.batch_*): token k of the order (position, window)
// so that a batch holds different windows at one position first, as sequences decoding side by
// side.
void union_densities(const model::Model& m, const KeptMasks& masks, int sites,
                     const SparsifyOptions& opts, SparsifyResult& r) {
  const int64_t n_held = opts.heldout_samples * opts.ctx;
  std::vector<int64_t> order;
  for (int64_t p = 0; p < opts.ctx; ++p) {
    for (int64_t w = 0; w < opts.heldout_samples; ++w) order.push_back(w * opts.ctx + p);
  }
  std::vector<uint64_t> acc;
  for (int64_t b = 1; b <= std::min<int64_t>(64, n_held); b *= 2) {
    std::array<double, sparsity::kTealSites> d{};
    const int64_t n_batches = n_held / b;
    for (int s = 0; s < sites; ++s) {
      double sum = 0;
      int64_t n = 0;
      for (int64_t il = 0; il < m.hparams().n_layer; ++il) {
        const size_t h = static_cast<size_t>(il) * sites + s;
        const int64_t width = masks.widths[h], words = (width + 63) / 64;
        if (width == 0) continue;
        for (int64_t g = 0; g < n_batches; ++g) {
          acc.assign(static_cast<size_t>(words), 0);
          for (int64_t j = 0; j < b; ++j) {
            const uint64_t* bits = masks.bits[h].data() + order[g * b + j] * words;
            for (int64_t k = 0; k < words; ++k) acc[k] |= bits[k];
          }
          int64_t ones = 0;
          for (uint64_t v : acc) ones += std::popcount(v);
          sum += static_cast<double>(ones) / static_cast<double>(width);
          ++n;
        }
      }
      d[s] = n ? sum / static_cast<double>(n) : 0.0;
    }
    r.batch_sizes.push_back(b);
    r.batch_density.push_back(d);
    r.batch_weighted_density.push_back(model::weighted_density(m, opts.method, d));
  }
}

}  // namespace

SparsifyResult calibrate_sparsity(const model::Model& m, const tokenizer::Tokenizer& tok,
                                  const std::string& text, const SparsifyOptions& opts,
                                  ThreadPool& pool) {
  check_options(opts);
  const model::HParams& hp = m.hparams();
  if (opts.method == Method::Cats && hp.ffn_act != model::HParams::FfnAct::Silu) {
    throw UsageError("CATS thresholds SiLU(gate); this model's MLP is not SwiGLU (use TEAL)");
  }
  if (opts.ctx > hp.n_ctx_train) {
    throw UsageError("the calibration context " + std::to_string(opts.ctx) + " exceeds the model's " +
                     std::to_string(hp.n_ctx_train) + " tokens");
  }
  // Thresholds from the head of the text, the density check on its tail.
  size_t cut = static_cast<size_t>(static_cast<double>(text.size()) * opts.calib_fraction);
  cut = std::min(text.size(), text.find('\n', cut) == std::string::npos ? text.size()
                                                                          : text.find('\n', cut) + 1);
  const std::string head = text.substr(0, cut), tail = text.substr(cut);
  if (tail.empty()) throw UsageError("the calibration text is too short to hold back a part");
  const calib::CalibSamples calib = calib::sample_calibration_text(head, tok, opts.n_samples, opts.ctx, opts.seed);
  const calib::CalibSamples held =
      calib::sample_calibration_text(tail, tok, opts.heldout_samples, opts.ctx, opts.seed + 1);

  SparsifyResult r;
  r.text_hash = calib.text_hash;
  SiteCalibration c(m, opts, pool);
  if (opts.method == Method::Relu) {
    r.table = sparsity::ThresholdTable::relu(hp.n_layer);  // nothing to calibrate
  } else {
    calibrate_levels(m, c, calib, opts, pool, r);
    r.calib_tokens = opts.n_samples * opts.ctx;
  }
  const KeptMasks masks = check_heldout(m, c, held, opts, pool, r);
  union_densities(m, masks, c.sites(), opts, r);
  return r;
}

void write_sparsified(const gguf::File& src, const SparsifyResult& r, const SparsifyOptions& opts,
                      const std::string& calib_file, const std::string& out_path,
                      const std::atomic<bool>* cancel) {
  auto own = [](std::string_view key) { return key.rfind("squeeze.sparsity.", 0) == 0; };
  write_with_metadata(src, own, [&](gguf::Writer& w) {
    r.table.write(w);
    const std::string base = calib_file.substr(calib_file.find_last_of('/') + 1);
    w.add_string("squeeze.sparsity.calib.file", base);
    w.add_string("squeeze.sparsity.calib.text_hash", r.text_hash);
    w.add_uint32("squeeze.sparsity.calib.samples", static_cast<uint32_t>(opts.n_samples));
    w.add_uint32("squeeze.sparsity.calib.ctx", static_cast<uint32_t>(opts.ctx));
    w.add_uint64("squeeze.sparsity.calib.seed", opts.seed);
    // Per asked level: the level, then the density of each site on held-back text.
    std::vector<float> levels, dens;
    for (size_t i = 0; i < opts.levels.size(); ++i) {
      levels.push_back(static_cast<float>(std::round(opts.levels[i] * 100) / 100));
      for (int s = 0; s < r.table.sites(); ++s) {
        dens.push_back(static_cast<float>(r.heldout_density[i][s]));
      }
    }
    w.add_float32_array("squeeze.sparsity.refined_levels", levels);
    w.add_uint32("squeeze.sparsity.refine_passes", static_cast<uint32_t>(opts.refine_passes));
    w.add_string("squeeze.sparsity.allocation", opts.greedy ? "greedy" : "uniform");
    w.add_float32_array("squeeze.sparsity.heldout_density", dens);
    if (!r.heldout_head_density.empty()) {
      std::vector<float> head(r.heldout_head_density.begin(), r.heldout_head_density.end());
      w.add_float32_array("squeeze.sparsity.heldout_head_density", head);
    }
    w.add_uint32("squeeze.sparsity.heldout_tokens", static_cast<uint32_t>(r.heldout_tokens));
  }, out_path, cancel);
}

}  // namespace squeeze::compress
