// Per-domain FFN masks (contextual pruning, as in Mini-GPTs): the neurons of every layer are
// ranked separately on each domain's calibration text and several masks are stored in one GGUF
// (the dense model's tensors unchanged, the masks as metadata); at run time `--domain NAME`
// loads the model restricted to that domain's neurons (the smaller model `--structure ffn`
// would write, built in memory), and `--domain auto` chooses the domain a linear router
// scores highest on the prompt's early-layer activations.
//
// Metadata (squeeze.domains.*): names (string array), method, sparsity, ffn_length (the width
// kept), route_layer, route_tokens (the window the router was trained on), and per domain
// NAME: NAME.neurons (int32 [n_layer * ffn_length], each layer's kept neurons ascending),
// NAME.route_weight (float32 [n_embd]), NAME.route_bias (float32), NAME.calibration.file and
// NAME.calibration.fnv1a64.
//
// Routing feature: the mean over a text's tokens (the first, BOS, left out) of the unit-length
// residual stream after layer route_layer of the dense model, normalized. The router is
// multinomial logistic regression on that feature (score_d = w_d . f + b_d, the highest
// wins), trained on windows of route_tokens tokens of every domain's calibration text with
// the features standardized per channel; the standardization is folded into w and b.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compress/prune_structured.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace squeeze::compress {

struct DomainSpec {
  std::string name;
  std::string calib_path;
};

// "code=FILE,docs=FILE" (names: letters, digits, '_' and '-'; distinct; at least one).
// Throws UsageError.
std::vector<DomainSpec> parse_domains(std::string_view spec);

struct DomainTable {
  std::vector<std::string> names;
  int64_t ffn_length = 0;
  int64_t route_layer = 0;
  std::vector<std::vector<std::vector<int64_t>>> neurons;  // [domain][layer] kept, ascending
  int64_t route_tokens = 0;
  std::vector<std::vector<float>> route_weight;            // [domain][n_embd]
  std::vector<float> route_bias;                           // [domain]
  // The index of `name`; UsageError naming the domains the file has.
  int64_t index(std::string_view name) const;
};

// The file's masks, or nullopt when it has none. Throws FormatError for malformed ones.
std::optional<DomainTable> read_domains(const gguf::File& f, int64_t n_layer, int64_t n_embd);

// The routing feature of `tokens` (at least 2) on the dense model m.
std::vector<float> route_feature(const model::Model& m, std::span<const int32_t> tokens,
                                 int64_t route_layer, ThreadPool& pool);

// The domain the router scores highest for `feature`; *probability gets its softmax share.
int64_t route_domain(const DomainTable& t, std::span<const float> feature, double* probability = nullptr);

struct LinearRouter {
  std::vector<std::vector<float>> weight;  // [class][n_features]
  std::vector<float> bias;                 // [class]
};

// Multinomial logistic regression of features[c] (each row a sample of class c, all rows of
// one length) with an L2 penalty `l2` on the weights, by gradient descent on the features
// standardized per channel (mean 0, deviation 1; the standardization folded into the result,
// which scores raw features). Deterministic.
LinearRouter train_router(const std::vector<std::vector<std::vector<float>>>& features, double l2 = 0.01,
                          int iterations = 500);

// The model restricted to domain d's neurons, as a new Model held in memory.
std::unique_ptr<model::Model> domain_model(const model::Model& dense, const DomainTable& t, int64_t d,
                                           ThreadPool& pool);

struct DomainPruneStats {
  int64_t n_ff_before = 0;
  int64_t n_ff_after = 0;
};

// Ranks every layer's neurons on each domain's text by o.criterion (wanda or taylor; o's
// calibration samples and ctx), trains the router on windows of each domain's text and writes
// a copy of model_path with the masks and the router.
// Throws UsageError (bad options, a model squeeze cannot prune), Interrupted on cancel.
DomainPruneStats prune_domains(const std::string& model_path, const std::string& out_path,
                               const StructuredPruneOptions& o, const std::vector<DomainSpec>& domains,
                               ThreadPool& pool);

}  // namespace squeeze::compress
