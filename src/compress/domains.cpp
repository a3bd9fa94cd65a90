#include "compress/domains.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "calib/calib.h"
#include "compress/output.h"
#include "core/error.h"
#include "model/context.h"
#include "model/names.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::compress {

namespace {

constexpr std::string_view kPrefix = "squeeze.domains.";
// The router's training windows per domain, and their length in tokens (BOS included): prompts
// are routed on their first tokens, so the router learns on windows of a prompt's length.
constexpr int64_t kRouteSamples = 256;
constexpr int64_t kRouteTokens = 64;

std::string key(std::string_view suffix) { return std::string(kPrefix) + std::string(suffix); }

void normalize(std::vector<double>& v) {
  double n = 0.0;
  for (double x : v) n += x * x;
  n = std::sqrt(n);
  if (n > 0.0) {
    for (double& x : v) x /= n;
  }
}

}  // namespace

std::vector<DomainSpec> parse_domains(std::string_view spec) {
  std::vector<DomainSpec> out;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string_view item = spec.substr(start, comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size()) {
      throw UsageError("--domains wants NAME=FILE[,NAME=FILE...], got '" + std::string(item) + "'");
    }
    DomainSpec d{std::string(item.substr(0, eq)), std::string(item.substr(eq + 1))};
    for (char c : d.name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') {
        throw UsageError("--domains: a name is letters, digits, '_' or '-', got '" + d.name + "'");
      }
    }
    if (d.name == "auto") throw UsageError("--domains: 'auto' is not a domain name (it asks for routing)");
    for (const DomainSpec& e : out) {
      if (e.name == d.name) throw UsageError("--domains: '" + d.name + "' given twice");
    }
    out.push_back(std::move(d));
    start = comma + 1;
  }
  return out;
}

int64_t DomainTable::index(std::string_view name) const {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<int64_t>(i);
  }
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  throw UsageError("--domain '" + std::string(name) + "': the model's domains are " + all + " (or auto)");
}

std::optional<DomainTable> read_domains(const gguf::File& f, int64_t n_layer, int64_t n_embd) {
  if (f.find(key("names")) == nullptr) return std::nullopt;
  DomainTable t;
  for (std::string_view n : f.require_string_array(key("names"))) t.names.emplace_back(n);
  t.ffn_length = f.require_int(key("ffn_length"));
  t.route_layer = f.require_int(key("route_layer"));
  t.route_tokens = f.require_int(key("route_tokens"));
  const auto bad = [&](const std::string& what) { return FormatError(f.path() + ": " + what); };
  if (t.names.empty()) throw bad(key("names") + " is empty");
  if (t.ffn_length <= 0) throw bad(key("ffn_length") + " is not positive");
  if (t.route_layer < 0 || t.route_layer >= n_layer) throw bad(key("route_layer") + " is not a layer");
  if (t.route_tokens < 2) throw bad(key("route_tokens") + " is below 2");
  for (const std::string& name : t.names) {
    const std::vector<int64_t> flat = f.get_int_array(key(name + ".neurons"));
    if (static_cast<int64_t>(flat.size()) != n_layer * t.ffn_length) {
      throw bad(key(name + ".neurons") + " does not hold " + std::to_string(t.ffn_length) + " neurons per layer");
    }
    std::vector<std::vector<int64_t>> layers(static_cast<size_t>(n_layer));
    for (int64_t il = 0; il < n_layer; ++il) {
      layers[il].assign(flat.begin() + il * t.ffn_length, flat.begin() + (il + 1) * t.ffn_length);
    }
    t.neurons.push_back(std::move(layers));
    std::vector<float> w = f.get_float_array(key(name + ".route_weight"));
    if (static_cast<int64_t>(w.size()) != n_embd) throw bad(key(name + ".route_weight") + " is not [n_embd]");
    t.route_weight.push_back(std::move(w));
    t.route_bias.push_back(static_cast<float>(f.require_float(key(name + ".route_bias"))));
  }
  return t;
}

std::vector<float> route_feature(const model::Model& m, std::span<const int32_t> tokens,
                                 int64_t route_layer, ThreadPool& pool) {
  const int64_t n_embd = m.hparams().n_embd, n = static_cast<int64_t>(tokens.size());
  if (n < 2) throw UsageError("routing needs at least 2 tokens");
  std::vector<double> sum(static_cast<size_t>(n_embd), 0.0);
  int64_t pos = 0;  // position of the callback's first row
  model::Context ctx(m, n, pool, n);
  ctx.set_callback([&](std::string_view name, int layer, const float* x, int64_t rows, int64_t width) {
    if (name != model::names::kLOut || layer != route_layer) return;
    for (int64_t r = 0; r < rows; ++r, ++pos) {
      if (pos == 0) continue;  // BOS (or the first token): an outlier everywhere
      double norm = 0.0;
      for (int64_t i = 0; i < width; ++i) norm += static_cast<double>(x[r * width + i]) * x[r * width + i];
      norm = std::sqrt(std::max(norm, 1e-30));
      for (int64_t i = 0; i < width; ++i) sum[i] += x[r * width + i] / norm;
    }
  });
  ctx.decode_from(tokens, n);
  normalize(sum);
  return {sum.begin(), sum.end()};
}

int64_t route_domain(const DomainTable& t, std::span<const float> feature, double* probability) {
  std::vector<double> score(t.route_weight.size());
  for (size_t d = 0; d < score.size(); ++d) {
    double z = t.route_bias[d];
    for (size_t i = 0; i < feature.size(); ++i) z += static_cast<double>(feature[i]) * t.route_weight[d][i];
    score[d] = z;
  }
  const auto best = static_cast<int64_t>(std::max_element(score.begin(), score.end()) - score.begin());
  if (probability != nullptr) {
    double sum = 0.0;
    for (double z : score) sum += std::exp(z - score[best]);
    *probability = 1.0 / sum;
  }
  return best;
}

LinearRouter train_router(const std::vector<std::vector<std::vector<float>>>& features, double l2, int iterations) {
  const auto n_class = static_cast<int64_t>(features.size());
  if (n_class < 1) throw Error("train_router: no classes");
  int64_t n = 0, p = -1;
  for (const auto& rows : features) {
    if (rows.empty()) throw Error("train_router: a class without samples");
    for (const auto& r : rows) {
      if (p < 0) p = static_cast<int64_t>(r.size());
      if (static_cast<int64_t>(r.size()) != p) throw Error("train_router: samples differ in length");
      ++n;
    }
  }
  // Standardized samples, row-major [n][p], and their classes.
  std::vector<double> mean(p, 0.0), dev(p, 0.0), x(static_cast<size_t>(n * p));
  std::vector<int64_t> label;
  for (int64_t c = 0; c < n_class; ++c) {
    for (const auto& r : features[c]) {
      for (int64_t i = 0; i < p; ++i) mean[i] += r[i];
      label.push_back(c);
    }
  }
  for (double& m : mean) m /= static_cast<double>(n);
  for (const auto& rows : features) {
    for (const auto& r : rows) {
      for (int64_t i = 0; i < p; ++i) dev[i] += (r[i] - mean[i]) * (r[i] - mean[i]);
    }
  }
  for (double& d : dev) d = std::sqrt(d / static_cast<double>(n)) + 1e-8;
  int64_t row = 0;
  for (const auto& rows : features) {
    for (const auto& r : rows) {
      for (int64_t i = 0; i < p; ++i) x[row * p + i] = (r[i] - mean[i]) / dev[i];
      ++row;
    }
  }
  // Gradient descent on the mean cross-entropy plus l2/2 |w|^2 (a smooth, convex loss: a step
  // of 0.5 suits standardized features).
  constexpr double kStep = 0.5;
  std::vector<double> w(static_cast<size_t>(n_class * p), 0.0), b(n_class, 0.0);
  std::vector<double> gw(w.size()), gb(n_class), prob(n_class);
  for (int it = 0; it < iterations; ++it) {
    std::fill(gw.begin(), gw.end(), 0.0);
    std::fill(gb.begin(), gb.end(), 0.0);
    for (int64_t s = 0; s < n; ++s) {
      const double* xs = x.data() + s * p;
      double top = -1e300;
      for (int64_t c = 0; c < n_class; ++c) {
        double z = b[c];
        for (int64_t i = 0; i < p; ++i) z += w[c * p + i] * xs[i];
        prob[c] = z;
        top = std::max(top, z);
      }
      double sum = 0.0;
      for (double& z : prob) sum += (z = std::exp(z - top));
      for (int64_t c = 0; c < n_class; ++c) {
        const double g = (prob[c] / sum - (label[s] == c ? 1.0 : 0.0)) / static_cast<double>(n);
        gb[c] += g;
        for (int64_t i = 0; i < p; ++i) gw[c * p + i] += g * xs[i];
      }
    }
    for (size_t k = 0; k < w.size(); ++k) w[k] -= kStep * (gw[k] + l2 * w[k]);
    for (int64_t c = 0; c < n_class; ++c) b[c] -= kStep * gb[c];
  }
  // Folded: w . (f - mean) / dev + b = (w / dev) . f + (b - (w / dev) . mean).
  LinearRouter r;
  for (int64_t c = 0; c < n_class; ++c) {
    std::vector<float> wc(p);
    double bc = b[c];
    for (int64_t i = 0; i < p; ++i) {
      const double wi = w[c * p + i] / dev[i];
      wc[i] = static_cast<float>(wi);
      bc -= wi * mean[i];
    }
    r.weight.push_back(std::move(wc));
    r.bias.push_back(static_cast<float>(bc));
  }
  return r;
}

std::unique_ptr<model::Model> domain_model(const model::Model& dense, const DomainTable& t, int64_t d,
                                           ThreadPool& pool) {
  StructuredPruneOptions o;
  o.structure = Structure::Ffn;
  o.criterion = Criterion::Magnitude;  // unused: the neurons are given
  o.fraction = 0.5;                    // unused likewise
  o.keep = t.neurons[static_cast<size_t>(d)];
  StructuredPruneStats st;
  const gguf::Writer w = build_structured(dense, o, pool, st);
  return model::Model::load(gguf::File::from_bytes(dense.file().path() + " (domain " + t.names[d] + ")", w.to_bytes()));
}

DomainPruneStats prune_domains(const std::string& model_path, const std::string& out_path,
                               const StructuredPruneOptions& o, const std::vector<DomainSpec>& domains,
                               ThreadPool& pool) {
  if (o.structure != Structure::Ffn) throw UsageError("--domains prunes FFN neurons (--structure ffn)");
  if (o.criterion != Criterion::Wanda && o.criterion != Criterion::Taylor) {
    throw UsageError("--domains ranks neurons by wanda or taylor (flap's biases and magnitude's "
                     "single ranking have no per-domain form here)");
  }
  if (domains.empty()) throw UsageError("--domains names no domain");
  check_structured_options(o);
  std::unique_ptr<model::Model> m = model::Model::load(model_path);
  check_output_path(m->file(), out_path);
  const model::HParams& hp = m->hparams();
  const int64_t route_layer = std::min<int64_t>(2, hp.n_layer - 1);
  DomainPruneStats ds;
  ds.n_ff_before = hp.n_ff;
  const int64_t route_tokens = std::min<int64_t>(kRouteTokens, hp.n_ctx_train);
  struct Result {
    std::vector<int32_t> neurons;
    std::string hash;
  };
  std::vector<Result> results;
  std::vector<std::vector<std::vector<float>>> route_features;  // [domain][window]
  tokenizer::Tokenizer tok(tokenizer::read_vocab(m->file()));
  for (const DomainSpec& d : domains) {
    if (o.log) o.log("domain " + d.name + ": " + d.calib_path, false);
    StructuredPruneOptions od = o;
    od.calib_path = d.calib_path;
    StructuredPruneStats st;
    build_structured(*m, od, pool, st);
    ds.n_ff_after = st.units_after;
    Result r;
    for (const std::vector<int64_t>& layer : st.kept) r.neurons.insert(r.neurons.end(), layer.begin(), layer.end());
    // The router's features, on windows of a prompt's length of the same text.
    const calib::CalibSamples windows = calib::sample_calibration_text(
        calib::read_calibration_text(d.calib_path), tok, kRouteSamples, route_tokens, o.seed);
    r.hash = windows.text_hash;
    std::vector<std::vector<float>>& feats = route_features.emplace_back();
    for (size_t i = 0; i < windows.samples.size(); ++i) {
      if (cancelled(o.cancel)) throw Interrupted("interrupted; no output written");
      feats.push_back(route_feature(*m, windows.samples[i], route_layer, pool));
      if (o.log) {
        o.log("domain " + d.name + ": routing window " + std::to_string(i + 1) + "/" +
                  std::to_string(windows.samples.size()), true);
      }
    }
    results.push_back(std::move(r));
  }
  if (cancelled(o.cancel)) throw Interrupted("interrupted; no output written");
  const LinearRouter router = train_router(route_features);
  write_with_metadata(
      m->file(), [](std::string_view k) { return k.starts_with(kPrefix); },
      [&](gguf::Writer& w) {
        std::vector<std::string> names;
        for (const DomainSpec& d : domains) names.push_back(d.name);
        w.add_string_array(key("names"), names);
        w.add_string(key("method"), std::string(criterion_name(o.criterion)));
        w.add_float32(key("sparsity"), static_cast<float>(o.fraction));
        w.add_uint32(key("ffn_length"), static_cast<uint32_t>(ds.n_ff_after));
        w.add_uint32(key("route_layer"), static_cast<uint32_t>(route_layer));
        w.add_uint32(key("route_tokens"), static_cast<uint32_t>(route_tokens));
        w.add_uint32(key("calibration.samples"), static_cast<uint32_t>(o.calib_samples));
        w.add_uint32(key("calibration.ctx"), static_cast<uint32_t>(o.calib_ctx));
        w.add_uint64(key("calibration.seed"), o.seed);
        for (size_t i = 0; i < domains.size(); ++i) {
          const std::string& n = domains[i].name;
          w.add_int32_array(key(n + ".neurons"), results[i].neurons);
          w.add_float32_array(key(n + ".route_weight"), router.weight[i]);
          w.add_float32(key(n + ".route_bias"), router.bias[i]);
          w.add_string(key(n + ".calibration.file"),
                       std::filesystem::path(domains[i].calib_path).filename().string());
          w.add_string(key(n + ".calibration.fnv1a64"), results[i].hash);
        }
      },
      out_path, o.cancel);
  return ds;
}

}  // namespace squeeze::compress
