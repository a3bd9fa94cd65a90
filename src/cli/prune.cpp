// squeeze prune: unstructured or N:M pruning of every block's weight matrices by magnitude,
// Wanda or SparseGPT (compress/prune.h), stored densely in a symmetric type (q8_0 by default,
// q4_0 / sq types with --bits) through quantize_model, so llama.cpp loads the result.
// Progress on stderr; Ctrl-C (SIGINT) or SIGTERM stops and leaves no output behind.
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "compress/domains.h"
#include "compress/output.h"
#include "compress/prune_structured.h"
#include "compress/quantize_model.h"
#include "core/error.h"
#include "core/timer.h"

namespace squeeze::cli {

namespace {

// --structure: whole units out (compress/prune_structured.h), with a summary line.
int run_structured(const std::string& in, const std::string& out, const std::string& structure,
                   const std::string& method_name, const std::string& domains,
                   const compress::QuantizeOptions& qo, const CalibOptions& cal, int threads) {
  compress::StructuredPruneOptions so;
  so.structure = compress::parse_structure(structure);
  so.criterion = compress::parse_criterion(so.structure, method_name);
  so.fraction = qo.prune.sparsity;
  so.calib_path = qo.calib_path;
  so.calib_samples = qo.calib_samples;
  so.calib_ctx = qo.calib_ctx;
  so.seed = qo.seed;
  if (!domains.empty() && cal.calib->count() > 0) {
    throw UsageError("--calib does not apply to --domains (each domain names its text)");
  }
  if (so.criterion == compress::Criterion::Magnitude) {
    for (const CLI::Option* opt : {cal.calib, cal.samples, cal.ctx, cal.seed}) {
      if (opt->count() > 0) throw UsageError(opt->get_name() + " is not used by --method magnitude");
    }
  }
  so.cancel = &stop_requested();
  LogLines log;
  so.log = std::ref(log);
  ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
  const Timer timer;
  compress::StructuredPruneStats st;
  try {
    if (!domains.empty()) {
      const std::vector<compress::DomainSpec> specs = compress::parse_domains(domains);
      const compress::DomainPruneStats ds = compress::prune_domains(in, out, so, specs, pool);
      std::fprintf(stderr, "prune: %s ffn masks of %zu domains: %lld -> %lld neurons per layer each, "
                   "in %.1f s -> %s\n", method_name.c_str(), specs.size(),
                   static_cast<long long>(ds.n_ff_before), static_cast<long long>(ds.n_ff_after),
                   timer.seconds(), out.c_str());
      return 0;
    }
    st = compress::prune_structured(in, out, so, pool);
  } catch (const compress::Interrupted& e) {
    return interrupted_exit(e, log.transient_shown());
  }
  std::string removed;
  for (int64_t il : st.layers_removed) {
    removed += removed.empty() ? " (" : ",";
    removed += std::to_string(il);
  }
  if (!removed.empty()) removed += ')';
  const char* unit = so.structure == compress::Structure::Ffn     ? "neurons per layer"
                     : so.structure == compress::Structure::Heads ? "KV groups per layer"
                                                                  : "layers";
  std::fprintf(stderr,
               "prune: %s %s: %lld -> %lld %s%s, %.2f%% of the parameters removed, "
               "%.2f MiB -> %.2f MiB in %.1f s -> %s\n",
               method_name.c_str(), structure.c_str(), static_cast<long long>(st.units_before),
               static_cast<long long>(st.units_after), unit, removed.c_str(),
               100.0 * (1.0 - static_cast<double>(st.params_after) / st.params_before),
               st.bytes_in / 1048576.0, st.bytes_out / 1048576.0, timer.seconds(), out.c_str());
  return 0;
}

}  // namespace

int cmd_prune(int argc, char** argv) {
  CLI::App app{"Prune the weight matrices of every block (attention and feed-forward) to a "
               "fraction of zeros (--sparsity) or an N:M pattern (--pattern: N zeros in every M "
               "consecutive weights of a row), by magnitude, Wanda (|w| times the input norm) or "
               "SparseGPT (with the weights that stay updated through the inverse Hessian, "
               "jointly with quantization to --bits), calibrated block by block on the pruned "
               "model's own activations. The pruned matrices are stored densely in a symmetric "
               "type where zero is exact: q8_0 by default, q4_0 with --bits 4, squeeze's sq "
               "types for other groups. An existing OUT is replaced (only once the new file is "
               "complete).",
               "squeeze prune"};
  std::string in, out, method_name, pattern, structure, domains, scale_name = "absmax";
  std::vector<std::string> tensor_types;
  compress::QuantizeOptions qo;
  compress::QuantScheme& scheme = qo.gptq.scheme;
  scheme.bits = 8;
  scheme.sym = true;
  int threads = 0;
  app.add_option("-m,--model", in, "input GGUF file (default: models/" +
                                       std::string(kDefaultModelFile) + ")");
  app.add_option("-o,--output", out, "output GGUF file")->required();
  app.add_option("--method", method_name, "magnitude, wanda or sparsegpt (--structure: magnitude, wanda, flap, taylor; layers: bi)")->required();
  auto* sparsity_opt = app.add_option("--sparsity", qo.prune.sparsity,
                                      "fraction of each matrix's weights set to zero, in (0, 1)");
  auto* pattern_opt = app.add_option("--pattern", pattern,
                                     "N:M instead of --sparsity: N zeros in every M weights "
                                     "(2:4, 4:8; M divides 128)")
                          ->excludes(sparsity_opt);
  sparsity_opt->excludes(pattern_opt);
  auto* structure_opt = app.add_option(
      "--structure", structure,
      "remove whole units instead, writing a smaller dense model llama.cpp loads: ffn (the "
      "fraction --sparsity of every layer's feed-forward neurons) or heads (of every layer's KV "
      "groups, each with its query heads), ranked by magnitude, wanda (Wanda-sp), flap (FLAP's "
      "fluctuation, with bias compensation) or, for ffn, taylor (LLM-Pruner's first-order "
      "Taylor importance); layers (--sparsity of the blocks), ranked by --method bi: "
      "ShortGPT's block influence");
  auto* domains_opt = app.add_option(
      "--domains", domains,
      "with --structure ffn: NAME=FILE[,NAME=FILE...]: one mask of neurons per domain, each "
      "ranked on its FILE (wanda or taylor), all stored in one file with the dense weights and "
      "a router trained on windows of every FILE; run, chat, perplexity, bench and serve take "
      "--domain NAME (run and chat also auto)");
  auto* layers_opt = app.add_option("--layer-sparsity", qo.layer_sparsity,
                 "RANGES=F: layers 0-based (e.g. 0-3,7=0.3) pruned to F instead of --sparsity; "
                 "repeatable, a later item wins");
  auto* owl_opt = app.add_flag("--owl", qo.owl.on,
               "OWL: per-layer sparsity from each layer's outlier ratio on the dense model "
               "(layers with more outliers keep more weights), averaging --sparsity");
  auto* owl_m_opt = app.add_option("--owl-m", qo.owl.m,
                                   "OWL: an outlier scores above M times its layer's mean (default 5)");
  auto* owl_l_opt = app.add_option("--owl-lambda", qo.owl.lambda,
                                   "OWL: layers' sparsities within +-lambda of --sparsity (default 0.08)");
  auto* packed_opt = app.add_flag("--packed", qo.packed,
               "store the pruned matrices as sp8_50 (squeeze's packed sparse q8_0: 16 of every 32 "
               "weights and a bitmap, 22 bytes instead of 34; decode reads only those); needs "
               "--pattern N:M with N >= M/2, M dividing 32, and 8 bits; llama.cpp cannot read it");
  auto* bits_opt = app.add_option("--bits", scheme.bits,
                                  "bits of the stored weights: 2, 3, 4 or 8 (default 8)");
  auto* group_opt = app.add_option("--group-size", scheme.group,
                                   "weights per scale: 32, 64, 128, or -1 for one per row (default 32)");
  auto* scale_opt = app.add_option("--scale", scale_name, "absmax or mse (default absmax)");
  auto* damp_opt = app.add_option("--damp", qo.gptq.damp,
                                  "SparseGPT damping, fraction of the mean Hessian diagonal "
                                  "(default 0.01)");
  const CalibOptions cal = add_calibration_options(app, qo, "wanda and sparsegpt");
  auto* tt_opt = app.add_option("--tensor-type", tensor_types,
                 "REGEX=TYPE: tensors whose name matches get TYPE (a plain type, or keep) and "
                 "are not pruned; repeatable, first match wins");
  app.add_option("-t,--threads", threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  if (auto rc = parse(app, argc, argv)) return *rc;

  StopOnSignal stop_on_signal;
  return guarded([&] {
    if (sparsity_opt->count() == 0 && pattern_opt->count() == 0) {
      throw UsageError("give --sparsity F or --pattern N:M");
    }
    if (domains_opt->count() > 0 && structure != "ffn") throw UsageError("--domains needs --structure ffn");
    if (structure_opt->count() > 0) {
      compress::parse_structure(structure);  // a bad name first
      for (const CLI::Option* opt : {pattern_opt, layers_opt, owl_opt, owl_m_opt, owl_l_opt,
                                     packed_opt, bits_opt, group_opt, scale_opt, damp_opt, tt_opt}) {
        if (opt->count() > 0) throw UsageError(opt->get_name() + " does not apply to --structure " + structure);
      }
      return run_structured(resolve_model_path(in), out, structure, method_name, domains, qo, cal, threads);
    }
    qo.prune.method = compress::parse_prune_method(method_name);
    if (pattern_opt->count() > 0) compress::parse_nm_pattern(pattern, qo.prune);
    compress::check_prune_spec(qo.prune);
    const bool calibrated = qo.prune.needs_hessian();
    for (const CLI::Option* opt : {cal.calib, cal.samples, cal.ctx, cal.seed}) {
      if (opt->count() > 0 && !calibrated) {
        throw UsageError(opt->get_name() + " is only used by --method wanda or sparsegpt");
      }
    }
    if (damp_opt->count() > 0 && qo.prune.method != compress::PruneMethod::SparseGpt) {
      throw UsageError("--damp is only used by --method sparsegpt");
    }
    for (const CLI::Option* opt : {owl_m_opt, owl_l_opt}) {
      if (opt->count() > 0 && !qo.owl.on) throw UsageError(opt->get_name() + " needs --owl");
    }
    scheme.scale = compress::parse_scale_method(scale_name);
    if (scheme.scale != compress::ScaleMethod::Absmax && scheme.scale != compress::ScaleMethod::Mse) {
      throw UsageError("--scale: pruning takes absmax or mse");
    }
    compress::check_scheme(scheme);
    for (const std::string& spec : tensor_types) {
      qo.overrides.push_back(compress::parse_tensor_type(spec));
    }
    ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
    const Timer timer;
    const std::optional<compress::QuantizeStats> done =
        quantize_with_progress(resolve_model_path(in), out, qo, pool);
    if (!done) return 130;
    const compress::QuantizeStats& st = *done;
    const std::string method(compress::prune_method_name(qo.prune.method));
    std::fprintf(stderr,
                 "prune: %s %s, stored %s: %zu matrices, %.2f%% of their weights zero, "
                 "%.2f MiB -> %.2f MiB in %.1f s, %d threads -> %s\n",
                 method.c_str(), compress::prune_pattern_text(qo.prune).c_str(),
                 compress::scheme_text(scheme).c_str(), st.n_method,
                 st.quantized_weights ? 100.0 * st.pruned_weights / st.quantized_weights : 0.0,
                 st.bytes_in / 1048576.0, st.bytes_out / 1048576.0, timer.seconds(), pool.size(),
                 out.c_str());
    if (calibrated) {
      std::fprintf(stderr, "prune: mean relative output error on the calibration inputs: "
                   "%s %.4g, magnitude %.4g\n", method.c_str(), st.mean_rel_error,
                   st.mean_rel_error_base);
    }
    return 0;
  });
}

}  // namespace squeeze::cli
