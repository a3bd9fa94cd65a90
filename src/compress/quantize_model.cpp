#include "compress/quantize_model.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compress/convert.h"
#include "compress/output.h"
#include "compress/prune.h"
#include "compress/tensor_plan.h"
#include "calib/calib.h"
#include "core/timer.h"
#include "formats/sparse.h"
#include "formats/sq.h"
#include "model/arch.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::compress {

namespace {

using formats::DType;

constexpr uint32_t kGgmlQuantizationVersion = 2;
constexpr std::string_view kMetaPrefix = "squeeze.quantization.";
constexpr std::string_view kPruneMetaPrefix = "squeeze.pruning.";

enum class Action { Copy, Method, Convert };

struct Plan {
  const gguf::TensorInfo* t = nullptr;
  Action action = Action::Copy;
  DType type = DType::F32;
  Storage st;              // Action::Method
  int64_t layer = -1;      // block index of a layer matrix
  const model::LayerMatrix* layer_matrix = nullptr;  // the architecture's manifest entry
  std::string rule;        // the option that chose the type (TypeRule::source), if any
  std::vector<uint8_t> data;  // the output bytes (Method, Convert)
};

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

std::string choice_text(const TypeChoice& c) {
  return c.keep ? "keep" : std::string(formats::format_info(c.type).name);
}

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

}  // namespace

TypeChoice parse_type_choice(std::string_view name) {
  TypeChoice c;
  if (lower(name) == "keep") return c;
  const formats::FormatInfo* info = formats::format_by_name(name);
  if (info == nullptr || !info->supported ||
      formats::kernels(info->type, Isa::Scalar).quantize_row_ref == nullptr) {
    throw UsageError("unknown or unwritable tensor type '" + std::string(name) +
                     "' (choose keep, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or sq{2,3,4}_g{32,64,128})");
  }
  c.keep = false;
  c.type = info->type;
  return c;
}

TypeRule type_rule(const std::string& name, bool tied_output, const QuantizeOptions& o) {
  const TensorTypeOverride* matched = nullptr;
  for (const TensorTypeOverride& ov : o.overrides) {
    if (ov.matches(name)) {
      matched = &ov;
      break;
    }
  }
  if (name == "token_embd.weight" && o.embd) return {&*o.embd, "--embd-type"};
  if (name == "output.weight" && o.output) return {&*o.output, "--output-type"};
  if (matched != nullptr) return {&matched->choice, "--tensor-type " + matched->pattern};
  if (name == "token_embd.weight" && tied_output && o.output) {
    return {&*o.output, "--output-type (tied head)"};
  }
  return {};
}

// A MoE layer's stacked expert matrix (blk.N.ffn_{gate,up,down}_exps.weight): every expert's rows
// one after the other, so RTN quantizes it row by row like any matrix.
bool is_expert_matrix(std::string_view name) {
  if (!name.starts_with("blk.")) return false;
  for (const std::string_view suffix : {".ffn_gate_exps.weight", ".ffn_up_exps.weight", ".ffn_down_exps.weight"}) {
    if (name.ends_with(suffix)) return true;
  }
  return false;
}

TensorTypeOverride parse_tensor_type(std::string_view spec) {
  const size_t eq = spec.rfind('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == spec.size()) {
    throw UsageError("--tensor-type wants REGEX=TYPE (got '" + std::string(spec) + "')");
  }
  TensorTypeOverride o;
  o.pattern = std::string(spec.substr(0, eq));
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(o.pattern.data()),
                                   o.pattern.size(), 0, &err, &err_offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> msg{};
    pcre2_get_error_message(err, msg.data(), msg.size());
    throw UsageError("--tensor-type: bad regular expression '" + o.pattern + "' at offset " +
                     std::to_string(err_offset) + ": " +
                     reinterpret_cast<const char*>(msg.data()));
  }
  o.re = std::shared_ptr<const void>(code, [](const void* c) {
    pcre2_code_free(static_cast<pcre2_code*>(const_cast<void*>(c)));
  });
  o.choice = parse_type_choice(spec.substr(eq + 1));
  return o;
}

bool TensorTypeOverride::matches(const std::string& name) const {
  const auto* code = static_cast<const pcre2_code*>(re.get());
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0, 0,
                             md.get(), nullptr);
  if (rc < PCRE2_ERROR_NOMATCH) {
    throw Error("--tensor-type '" + pattern + "': matching failed on '" + name + "'");
  }
  return rc >= 0;
}

QuantizeStats quantize_model(const std::string& model_path, const std::string& out_path,
                             const QuantizeOptions& o, ThreadPool& pool) {
  const QuantScheme& scheme = o.gptq.scheme;
  check_scheme(scheme);
  PruneSpec pruning = o.prune;  // with its per-layer fractions once the model is read
  check_prune_spec(pruning);
  const bool per_layer = !o.layer_sparsity.empty() || o.owl.on;
  if (per_layer && (!pruning.active() || pruning.nm())) {
    throw UsageError("--layer-sparsity and --owl set the fractions of unstructured pruning");
  }
  if (!o.layer_sparsity.empty() && o.owl.on) {
    throw UsageError("--layer-sparsity and --owl both set the per-layer fractions; give one");
  }
  if (o.owl.on && !(o.owl.m > 0.0 && o.owl.lambda >= 0.0 && o.owl.lambda < 0.5)) {
    throw UsageError("--owl-m must be positive and --owl-lambda in [0, 0.5)");
  }
  const bool sparsegpt = pruning.method == PruneMethod::SparseGpt;
  if (pruning.active() && o.method != QuantMethod::Rtn) {
    throw UsageError("pruning chooses its own quantizer (SparseGPT runs GPTQ's loop; magnitude "
                     "and Wanda round to nearest)");
  }
  // GPTQ's loop runs for GPTQ and SparseGPT; a calibration for them and for Wanda.
  GptqOptions gptq_opts = o.gptq;
  if (sparsegpt) gptq_opts.prune = pruning;
  const bool gptq = o.method == QuantMethod::Gptq || sparsegpt;
  if (gptq) check_gptq_options(gptq_opts);
  gptq_opts.prune = {};  // each matrix gets its layer's
  if (pruning.active() && !scheme.sym) {
    throw UsageError("a pruned matrix needs a symmetric grid, where zero is a code (--sym)");
  }
  const bool calibrate = gptq || pruning.needs_hessian();
  if (o.packed && !(pruning.nm() && 2 * pruning.n >= pruning.m && 32 % pruning.m == 0)) {
    throw UsageError("--packed stores at most 16 of every 32 weights: it needs --pattern N:M with "
                     "N >= M / 2 and M dividing 32 (2:4, 4:8, 8:16, 16:32)");
  }
  if (o.packed && !(scheme.bits == 8 && scheme.group == 32)) {
    throw UsageError("--packed stores q8_0's codes: it needs --bits 8 --group-size 32");
  }
  auto log = [&](const std::string& line, bool transient) {
    if (o.log) o.log(line, transient);
  };

  std::unique_ptr<model::Model> m = model::Model::load(model_path);
  const gguf::File& src = m->file();
  if (calibrate && m->hparams().n_expert > 0) {
    throw UsageError(src.path() + ": calibrated methods (gptq, wanda, sparsegpt) do not "
                     "calibrate a MoE model's experts yet (each expert's inputs are the tokens "
                     "routed to it); use --method rtn or magnitude");
  }
  check_output_path(src, out_path);
  const int64_t n_layer = m->hparams().n_layer;
  if (!o.layer_sparsity.empty()) {
    pruning.layer_sparsity = parse_layer_sparsity(o.layer_sparsity, n_layer, pruning.sparsity);
  }
  std::string calib_text;
  if (calibrate) calib_text = calib::read_calibration_text(o.calib_path);

  // --- the plan, checked in full before any work ---
  if (m->tied_output && o.embd && o.output) {
    throw UsageError("--embd-type and --output-type: this model has no output.weight (its head is "
                     "token_embd.weight), so both would set token_embd.weight; give one");
  }
  std::vector<Plan> plan;
  std::string embd_result = "keep", head_result = "keep";  // provenance: what those tensors got
  for (const gguf::TensorInfo& t : src.tensors()) {
    Plan p;
    p.t = &t;
    p.type = t.type;
    p.layer_matrix = model::find_layer_matrix(m->arch(), t.name, p.layer);
    const TypeRule rule = type_rule(t.name, m->tied_output, o);
    const TypeChoice* choice = rule.choice;
    p.rule = rule.source;
    if (choice != nullptr && t.name == "token_embd.weight") embd_result = choice_text(*choice);
    if (choice != nullptr && t.name == "output.weight") head_result = choice_text(*choice);
    if (choice != nullptr) {
      if (!choice->keep && choice->type != t.type) {
        if (t.shape[0] % formats::format_info(choice->type).block_size != 0) {
          throw UsageError("tensor '" + t.name + "': rows of " + std::to_string(t.shape[0]) +
                           " do not fit " + choice_text(*choice) + " blocks");
        }
        p.action = Action::Convert;
        p.type = choice->type;
      }
    } else if (p.layer_matrix != nullptr || is_expert_matrix(t.name)) {
      p.action = Action::Method;
      p.st = storage_for(scheme, t.shape[0]);
      p.type = p.st.type;
      if (pruning.nm() && t.shape[0] % pruning.m != 0) {
        throw UsageError("tensor '" + t.name + "': rows of " + std::to_string(t.shape[0]) +
                         " weights do not split into groups of " + std::to_string(pruning.m));
      }
    }
    plan.push_back(std::move(p));
  }

  calib::CalibSamples samples;
  if (calibrate) {
    if (o.calib_ctx > m->hparams().n_ctx_train) {
      throw UsageError("--calib-ctx " + std::to_string(o.calib_ctx) + " exceeds the model's " +
                       std::to_string(m->hparams().n_ctx_train) + " tokens");
    }
    tokenizer::Tokenizer tok(tokenizer::read_vocab(src));
    samples = calib::sample_calibration_text(calib_text, tok, o.calib_samples, o.calib_ctx, o.seed);
  }

  QuantizeStats stats;
  stats.n_tensors = plan.size();
  auto convert = [&](Plan& p) {
    const gguf::TensorInfo& t = *p.t;
    const int64_t rows = tensor_rows(t);
    p.data.resize(formats::row_bytes(p.type, t.shape[0]) * static_cast<size_t>(rows));
    if (!convert_rows(t.type, p.type, t.data, p.data.data(), t.shape[0], rows, pool, o.cancel)) {
      throw Interrupted("interrupted; no output written");
    }
    ++stats.n_override;
  };
  auto bind = [&](const Plan& p, ops::WeightView& v) {
    v.type = p.type;
    v.row_bytes = formats::row_bytes(p.type, v.n_cols);
    v.data = p.data.data();
  };
  auto check_cancel = [&] {
    if (cancelled(o.cancel)) throw Interrupted("interrupted; no output written");
  };

  // Embedding and head first: with GPTQ the calibration runs on the model as it will be.
  for (Plan& p : plan) {
    if (p.action != Action::Convert || p.layer_matrix != nullptr) continue;
    check_cancel();
    log("convert " + p.t->name + " -> " + std::string(formats::format_info(p.type).name) + " (" +
            p.rule + ")",
        false);
    convert(p);
    if (p.t->name == "token_embd.weight") {
      bind(p, m->token_embd);
      if (m->tied_output) bind(p, m->output);
    } else if (p.t->name == "output.weight") {
      bind(p, m->output);
    }
  }

  const Timer timer;
  size_t n_err = 0;
  // Magnitude pruning then RTN: the baseline pruning methods are compared with.
  auto magnitude_rtn = [&](std::vector<float> w, int64_t rows, int64_t cols, const Storage& st,
                           const PruneSpec& spec, void* dst) {
    PruneSpec mag = spec;
    mag.method = PruneMethod::Magnitude;
    const std::vector<float> sc = prune_scores(w.data(), rows, cols, PruneMethod::Magnitude, nullptr);
    const std::vector<uint8_t> mask = row_mask(sc.data(), rows, cols, mag, pool);
    for (size_t i = 0; i < w.size(); ++i) w[i] = mask[i] ? 0.0f : w[i];
    quantize_rtn(w.data(), rows, cols, scheme, st, dst, pool);
  };
  auto quantize_method = [&](Plan& p, const std::vector<double>* h) {
    const gguf::TensorInfo& t = *p.t;
    const int64_t cols = t.shape[0];
    const int64_t rows = tensor_rows(t);
    const std::vector<float> w = decode_rows(t.type, t.data, cols, rows, pool);
    p.data.resize(formats::row_bytes(p.type, cols) * static_cast<size_t>(rows));
    std::string line = t.name + " " + scheme_text(scheme) + " -> " +
                       std::string(formats::format_info(p.type).name) +
                       (p.st.fallback ? " (group " + std::to_string(p.st.group) + ": row of " +
                                            std::to_string(cols) + ")"
                                      : "");
    uint64_t zeros = 0;
    const PruneSpec spec = pruning.for_layer(p.layer);
    if (gptq) {
      std::vector<double> hw = *h;  // gptq_quantize consumes its copy
      GptqOptions go = gptq_opts;
      if (sparsegpt) go.prune = spec;
      const GptqStats gs = gptq_quantize(w.data(), rows, cols, hw, go, p.st, p.data.data(), pool);
      zeros = static_cast<uint64_t>(gs.pruned);
      if (gs.damp_used != o.gptq.damp) line += ", damp raised to " + fmt("%g", gs.damp_used);
      if (gs.dead_columns > 0) line += ", " + std::to_string(gs.dead_columns) + " dead columns";
    } else if (pruning.active()) {
      // Magnitude and Wanda: the mask first, then the remaining weights rounded.
      std::vector<float> wm = w;
      const std::vector<float> sc = prune_scores(w.data(), rows, cols, spec.method, h);
      const std::vector<uint8_t> mask = row_mask(sc.data(), rows, cols, spec, pool);
      for (size_t i = 0; i < wm.size(); ++i) {
        zeros += mask[i];
        if (mask[i]) wm[i] = 0.0f;
      }
      quantize_rtn(wm.data(), rows, cols, scheme, p.st, p.data.data(), pool);
    } else {
      quantize_rtn(w.data(), rows, cols, scheme, p.st, p.data.data(), pool);
    }
    if (pruning.active()) {
      line += ", " + fmt("%.1f%% zeros", 100.0 * static_cast<double>(zeros) /
                                              static_cast<double>(rows * cols));
      stats.pruned_weights += zeros;
    }
    if (h != nullptr) {
      // The output error on the calibration inputs, against the baseline: RTN with the same
      // scheme for GPTQ, magnitude pruning for the pruning methods.
      const std::vector<float> wq = decode_rows(p.type, p.data.data(), cols, rows, pool);
      std::vector<uint8_t> base(p.data.size());
      if (pruning.active()) magnitude_rtn(w, rows, cols, p.st, spec, base.data());
      else quantize_rtn(w.data(), rows, cols, scheme, p.st, base.data(), pool);
      const std::vector<float> wb = decode_rows(p.type, base.data(), cols, rows, pool);
      const double e = relative_output_error(w.data(), wq.data(), rows, cols, *h);
      const double eb = relative_output_error(w.data(), wb.data(), rows, cols, *h);
      stats.mean_rel_error += e;
      stats.mean_rel_error_base += eb;
      ++n_err;
      line += ": rel. output error " + fmt("%.4g", e) + " (" +
              (pruning.active() ? "magnitude " : "rtn ") + fmt("%.4g", eb) + ")";
    }
    if (o.packed) {
      // The q8_0 rows repacked: the same codes and scales, the pruned zeros left out.
      std::vector<uint8_t> packed(formats::row_bytes(DType::SP8_50, cols) * static_cast<size_t>(rows));
      const size_t qrb = formats::row_bytes(p.type, cols), prb = packed.size() / rows;
      for (int64_t r = 0; r < rows; ++r) {
        if (!formats::sp8_from_q8_0(p.data.data() + r * qrb, packed.data() + r * prb, cols)) {
          throw Error(t.name + ": a block keeps more than 16 weights after pruning");
        }
      }
      p.type = DType::SP8_50;
      p.data = std::move(packed);
      line += ", packed as sp8_50";
    }
    log(line, false);
    ++stats.n_method;
    stats.n_fallback += p.st.fallback ? 1 : 0;
    stats.quantized_weights += static_cast<uint64_t>(rows * cols);
    stats.quantized_bytes += p.data.size();
  };

  // Plans of each layer's matrices, by layer, in the manifest's order.
  const std::span<const model::LayerMatrix> manifest = m->arch().layer_matrices;
  std::vector<std::vector<Plan*>> by_layer(n_layer, std::vector<Plan*>(manifest.size()));
  for (Plan& p : plan) {
    if (p.layer_matrix != nullptr && p.layer < n_layer) {
      by_layer[p.layer][static_cast<size_t>(p.layer_matrix - manifest.data())] = &p;
    }
  }
  const auto progress = [&](int64_t il, const char* phase, int64_t done, int64_t total) {
    log("block " + std::to_string(il + 1) + "/" + std::to_string(n_layer) + ": " + phase + " " +
            std::to_string(done) + "/" + std::to_string(total) + " samples, " +
            fmt("%.0f s", timer.seconds()),
        true);
  };

  if (o.owl.on) {
    // OWL's outlier ratio of every layer on the dense model (Wanda's scores on its own
    // activations when the method calibrates, |w| otherwise), then the layers' fractions.
    std::vector<double> ratio(static_cast<size_t>(n_layer), 0.0);
    const auto layer_ratio = [&](int64_t il, const calib::BlockHessians* hs) {
      std::vector<std::vector<float>> scores;
      for (size_t k = 0; k < manifest.size(); ++k) {
        const Plan* p = by_layer[il][k];
        if (p == nullptr || p->action != Action::Method) continue;
        check_cancel();
        const int64_t cols = p->t->shape[0], rows = tensor_rows(*p->t);
        const std::vector<float> w = decode_rows(p->t->type, p->t->data, cols, rows, pool);
        scores.push_back(prune_scores(w.data(), rows, cols,
                                      hs ? PruneMethod::Wanda : PruneMethod::Magnitude,
                                      hs ? &hs->of(manifest[k].input) : nullptr));
      }
      std::vector<const std::vector<float>*> views;
      for (const auto& v : scores) views.push_back(&v);
      ratio[il] = outlier_ratio(views, o.owl.m);
    };
    if (calibrate) {
      log("owl: outlier ratios on the dense model's activations", false);
      calib::Calibrator dense(*m, samples.samples, pool);
      const auto apply = [&](int64_t il, const calib::BlockHessians& hs) { layer_ratio(il, &hs); };
      if (!dense.for_each_block(apply, progress, o.cancel)) check_cancel();
    } else {
      for (int64_t il = 0; il < n_layer; ++il) layer_ratio(il, nullptr);
    }
    pruning.layer_sparsity = owl_sparsities(ratio, pruning.sparsity, o.owl.lambda);
    for (int64_t il = 0; il < n_layer; ++il) {
      log("owl: layer " + std::to_string(il) + " outliers " + fmt("%.3f%%", 100.0 * ratio[il]) +
              ", sparsity " + fmt("%.3f", pruning.layer_sparsity[il]),
          false);
    }
  }

  if (!calibrate) {
    for (Plan& p : plan) {
      if (p.action == Action::Convert && p.data.empty()) {
        check_cancel();
        convert(p);
      }
      if (p.action != Action::Method) continue;
      check_cancel();
      quantize_method(p, nullptr);
    }
  } else {
    log("calibration: " + std::to_string(o.calib_samples) + " samples x " +
            std::to_string(o.calib_ctx) + " tokens from " + o.calib_path + " (" +
            std::to_string(samples.text_tokens) + " tokens)", false);
    calib::Calibrator cal(*m, samples.samples, pool);
    const auto apply = [&](int64_t il, const calib::BlockHessians& hs) {
      for (size_t k = 0; k < manifest.size(); ++k) {
        Plan* p = by_layer[il][k];
        if (p == nullptr) continue;
        check_cancel();
        if (p->action == Action::Method) quantize_method(*p, &hs.of(manifest[k].input));
        else if (p->action == Action::Convert) convert(*p);
        if (p->action != Action::Copy) bind(*p, m->layers[il].*manifest[k].view);
      }
    };
    if (!cal.for_each_block(apply, progress, o.cancel)) check_cancel();
    for (Plan& p : plan) {
      if (p.action == Action::Convert && p.data.empty()) {
        check_cancel();
        convert(p);
      }
    }
  }
  if (n_err > 0) {
    stats.mean_rel_error /= static_cast<double>(n_err);
    stats.mean_rel_error_base /= static_cast<double>(n_err);
  }
  check_cancel();

  // --- the file ---
  std::vector<std::string> skip_keys = {"split.no", "split.count", "split.tensors.count",
                                        "general.file_type", "general.quantization_version"};
  for (const gguf::KeyValue& kv : src.metadata()) {
    if (kv.key.starts_with(kMetaPrefix) || kv.key.starts_with(kPruneMetaPrefix)) {
      skip_keys.push_back(kv.key);
    }
  }
  const std::vector<std::string_view> skip(skip_keys.begin(), skip_keys.end());
  gguf::Writer w(src.alignment());
  w.copy_metadata(src, skip);
  w.add_uint32("general.quantization_version", kGgmlQuantizationVersion);
  // general.file_type only when the method's matrices are all of one llama.cpp type.
  std::optional<DType> method_type;
  bool one_type = true;
  for (const Plan& p : plan) {
    if (p.action != Action::Method) continue;
    if (method_type && *method_type != p.type) one_type = false;
    method_type = p.type;
  }
  if (method_type && one_type && !formats::is_sq(*method_type) && *method_type != DType::SP8_50) {
    w.add_uint32("general.file_type", target_type(*method_type).llama_ftype);
  }
  const std::string pre(kMetaPrefix);
  w.add_string(pre + "method", gptq ? "gptq" : "rtn");
  w.add_string(pre + "source_type", dominant_weight_type(src));
  w.add_uint32(pre + "bits", static_cast<uint32_t>(scheme.bits));
  w.add_int32(pre + "group_size", static_cast<int32_t>(scheme.group));
  w.add_bool(pre + "symmetric", scheme.sym);
  w.add_string(pre + "scale", std::string(scale_method_name(scheme.scale)));
  if (scheme.scale == ScaleMethod::Percentile) w.add_float32(pre + "percentile", scheme.percentile);
  // What token_embd.weight and the head got ("keep" or a type), whichever option set it; on a
  // tied model the head is token_embd.weight.
  if (m->tied_output) head_result = embd_result;
  w.add_string(pre + "embd_type", embd_result);
  w.add_string(pre + "output_type", head_result);
  w.add_bool(pre + "tied_output", m->tied_output);
  if (!o.overrides.empty()) {
    std::vector<std::string> ov;
    for (const auto& x : o.overrides) ov.push_back(x.pattern + "=" + choice_text(x.choice));
    w.add_string_array(pre + "tensor_types", ov);
  }
  if (gptq) {
    w.add_float32(pre + "gptq.damp", static_cast<float>(o.gptq.damp));
    w.add_uint32(pre + "gptq.block", static_cast<uint32_t>(o.gptq.block));
    w.add_bool(pre + "gptq.act_order", o.gptq.act_order);
    w.add_bool(pre + "gptq.static_groups", o.gptq.static_groups);
    if (!pruning.active()) {
      w.add_float32(pre + "gptq.mean_rel_output_error", static_cast<float>(stats.mean_rel_error));
    }
  }
  // The calibration goes with the method that asked for it.
  const std::string cal_pre = pruning.active() ? std::string(kPruneMetaPrefix) : pre;
  if (calibrate) {
    w.add_string(cal_pre + "calibration.file",
                 std::filesystem::path(o.calib_path).filename().string());
    w.add_string(cal_pre + "calibration.fnv1a64", samples.text_hash);
    w.add_uint64(cal_pre + "calibration.text_tokens", static_cast<uint64_t>(samples.text_tokens));
    w.add_uint32(cal_pre + "calibration.samples", static_cast<uint32_t>(o.calib_samples));
    w.add_uint32(cal_pre + "calibration.ctx", static_cast<uint32_t>(o.calib_ctx));
    w.add_uint64(cal_pre + "calibration.seed", o.seed);
  }
  if (pruning.active()) {
    w.add_string(cal_pre + "method", std::string(prune_method_name(pruning.method)));
    w.add_string(cal_pre + "pattern", pruning.nm() ? "n:m" : "unstructured");
    w.add_string(cal_pre + "storage", o.packed ? "sp8_50" : "dense");
    w.add_float32(cal_pre + "sparsity", static_cast<float>(pruning.fraction()));
    if (!pruning.layer_sparsity.empty()) {
      w.add_float32_array(cal_pre + "layer_sparsity",
                          {pruning.layer_sparsity.begin(), pruning.layer_sparsity.end()});
    }
    if (o.owl.on) {
      w.add_float32(cal_pre + "owl.m", static_cast<float>(o.owl.m));
      w.add_float32(cal_pre + "owl.lambda", static_cast<float>(o.owl.lambda));
    }
    if (pruning.nm()) {
      w.add_uint32(cal_pre + "n", static_cast<uint32_t>(pruning.n));
      w.add_uint32(cal_pre + "m", static_cast<uint32_t>(pruning.m));
    }
    w.add_uint64(cal_pre + "zeros", stats.pruned_weights);
    w.add_uint64(cal_pre + "weights", stats.quantized_weights);
    if (pruning.needs_hessian()) {
      w.add_float32(cal_pre + "mean_rel_output_error", static_cast<float>(stats.mean_rel_error));
      w.add_float32(cal_pre + "magnitude_mean_rel_output_error",
                    static_cast<float>(stats.mean_rel_error_base));
    }
  }
  for (const Plan& p : plan) {
    const gguf::TensorInfo& t = *p.t;
    stats.bytes_in += t.n_bytes;
    if (p.action == Action::Copy) {
      w.add_tensor(t.name, t.type, t.shape, {static_cast<const uint8_t*>(t.data), t.n_bytes});
      stats.bytes_out += t.n_bytes;
    } else {
      w.add_tensor(t.name, p.type, t.shape, p.data);
      stats.bytes_out += p.data.size();
    }
  }
  write_output(w, out_path, o.cancel);
  return stats;
}

}  // namespace squeeze::compress
