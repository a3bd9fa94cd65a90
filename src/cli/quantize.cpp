// squeeze quantize: round-to-nearest conversion between llama.cpp's block types
// (compress/convert.h), or calibrated quantization by RTN / GPTQ (compress/quantize_model.h). Progress on stderr; Ctrl-C (SIGINT) or SIGTERM stops at the next
// tensor and leaves no output behind.
#include <signal.h>

#include <cctype>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "compress/convert.h"
#include "compress/quantize_model.h"
#include "core/timer.h"

namespace squeeze::cli {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

void print_progress(size_t i, size_t n, const compress::TensorPlan& p) {
  const gguf::TensorInfo& t = *p.src;
  const std::string from(formats::format_info(t.type).name);
  const std::string to(formats::format_info(p.type).name);
  std::string what = p.action == compress::TensorAction::Copy ? "copy " + from : from + " -> " + to;
  if (p.fallback) what += " (row length " + std::to_string(t.shape[0]) + " does not fit the blocks)";
  std::fprintf(stderr, "[%4zu/%4zu] %-36s %-18s %s\n", i + 1, n, t.name.c_str(),
               shape_text(t.shape).c_str(), what.c_str());
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  CLI::App app{"Quantize a GGUF model. With --type: convert between llama.cpp's block types by "
               "plain round-to-nearest, as llama-quantize does for one type. With --method: "
               "quantize the weight matrices of every block to --bits with one scale and offset "
               "per --group-size, by round-to-nearest with a chosen scale (rtn) or by GPTQ on "
               "calibration text (gptq); the result is stored as q4_0 / q4_1 / q8_0 where it "
               "fits one exactly, as squeeze's sq*_g* types otherwise. An existing OUT is "
               "replaced (only once the new file is complete).",
               "squeeze quantize"};
  std::string in, out, type_name, method_name, scale_name = "absmax";
  std::string embd_type, output_type;
  std::vector<std::string> tensor_types;
  compress::QuantizeOptions qo;
  compress::QuantScheme& scheme = qo.gptq.scheme;
  int threads = 0;
  app.add_option("-m,--model", in, "input GGUF file (default: models/" +
                                       std::string(kDefaultModelFile) + ")");
  app.add_option("-o,--output", out, "output GGUF file")->required();
  auto* type_opt = app.add_option("--type", type_name,
                                  "plain conversion: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0 or q5_1");
  auto* method_opt = app.add_option("--method", method_name, "rtn or gptq")->excludes(type_opt);
  type_opt->excludes(method_opt);
  auto* bits_opt = app.add_option("--bits", scheme.bits, "2, 3, 4 or 8 (default 4)");
  auto* group_opt = app.add_option("--group-size", scheme.group,
                                   "32, 64, 128, or -1 for one group per row (default 32)");
  auto* sym_opt = app.add_flag("--sym", scheme.sym, "symmetric grid (default: asymmetric)");
  auto* scale_opt = app.add_option("--scale", scale_name,
                                   "absmax, percentile, mse or kl (default absmax)");
  auto* pct_opt = app.add_option("--percentile", scheme.percentile,
                                 "clip percentile of |w| for --scale percentile (default 99.9)");
  auto* damp_opt = app.add_option("--damp", qo.gptq.damp,
                                  "GPTQ damping, fraction of the mean Hessian diagonal (default 0.01)");
  auto* act_opt = app.add_flag("--act-order", qo.gptq.act_order,
                               "GPTQ: columns by decreasing Hessian diagonal");
  auto* static_opt = app.add_flag("--static-groups", qo.gptq.static_groups,
                                  "GPTQ with --act-order: group scales from the original weights");
  const CalibOptions cal = add_calibration_options(app, qo, "GPTQ");
  auto* tt_opt = app.add_option("--tensor-type", tensor_types,
                                "REGEX=TYPE: tensors whose name matches get TYPE (a plain type or "
                                "keep) instead of the method; repeatable, first match wins");
  auto* embd_opt = app.add_option("--embd-type", embd_type,
                                  "type of token_embd.weight (default keep); before any "
                                  "--tensor-type match");
  auto* out_type_opt = app.add_option(
      "--output-type", output_type,
      "type of the output head (default keep): output.weight, before any --tensor-type match; "
      "on a model with no output.weight (tied head, e.g. SmolLM2) token_embd.weight, as "
      "llama-quantize does, after a --tensor-type match and not together with --embd-type");
  app.add_option("-t,--threads", threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  if (auto rc = parse(app, argc, argv)) return *rc;

  StopOnSignal stop_on_signal;
  return guarded([&] {
    // Every option combination is checked before the model is read.
    auto only_with = [](const CLI::Option* opt, bool ok, const std::string& when) {
      if (opt->count() > 0 && !ok) throw UsageError(opt->get_name() + " is only used " + when);
    };
    if (type_name.empty() && method_name.empty()) {
      throw UsageError("give --type (plain conversion) or --method rtn|gptq");
    }
    const bool is_method = !method_name.empty();
    for (const CLI::Option* opt : {bits_opt, group_opt, sym_opt, scale_opt, tt_opt, embd_opt,
                                   out_type_opt}) {
      only_with(opt, is_method, "with --method");
    }
    ThreadPool pool(threads > 0 ? threads : ThreadPool::default_threads());
    if (!is_method) {
      const compress::TargetType& target = compress::parse_target_type(type_name);
      const gguf::File src = gguf::File::open(resolve_model_path(in));
      compress::ConvertOptions opts;
      opts.target = target.type;
      opts.cancel = &stop_requested();
      opts.on_tensor = print_progress;
      const Timer timer;
      compress::ConvertStats st;
      try {
        st = compress::convert_model(src, out, opts, pool);
      } catch (const compress::Interrupted& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 130;  // 128 + SIGINT, as a shell reports an interrupted command
      }
      std::fprintf(stderr,
                   "quantize: %zu tensors (%zu converted, %zu copied, %zu fell back to f16), "
                   "%.2f MiB -> %.2f MiB in %.2f s, %d threads -> %s\n",
                   st.n_tensors, st.n_converted, st.n_tensors - st.n_converted, st.n_fallback,
                   st.bytes_in / 1048576.0, st.bytes_out / 1048576.0, timer.seconds(),
                   pool.size(), out.c_str());
      return 0;
    }

    std::string method = method_name;
    for (char& c : method) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (method == "rtn") qo.method = compress::QuantMethod::Rtn;
    else if (method == "gptq") qo.method = compress::QuantMethod::Gptq;
    else throw UsageError("unknown --method '" + method_name + "' (choose rtn or gptq)");
    const bool is_gptq = qo.method == compress::QuantMethod::Gptq;
    for (const CLI::Option* opt : {damp_opt, act_opt, static_opt, cal.calib, cal.samples,
                                   cal.ctx, cal.seed}) {
      only_with(opt, is_gptq, "with --method gptq");
    }
    scheme.scale = compress::parse_scale_method(scale_name);
    only_with(pct_opt, scheme.scale == compress::ScaleMethod::Percentile,
              "with --scale percentile");
    compress::check_scheme(scheme);
    if (is_gptq) compress::check_gptq_options(qo.gptq);
    for (const std::string& spec : tensor_types) {
      qo.overrides.push_back(compress::parse_tensor_type(spec));
    }
    if (embd_opt->count() > 0) qo.embd = compress::parse_type_choice(embd_type);
    if (out_type_opt->count() > 0) qo.output = compress::parse_type_choice(output_type);
    const Timer timer;
    const std::optional<compress::QuantizeStats> done =
        quantize_with_progress(resolve_model_path(in), out, qo, pool);
    if (!done) return 130;
    const compress::QuantizeStats& st = *done;
    std::fprintf(stderr,
                 "quantize: %s %s: %zu tensors (%zu by the method, %zu of another type, %zu "
                 "with a smaller group), %.3f bits per quantized weight, %.2f MiB -> %.2f MiB "
                 "in %.1f s, %d threads -> %s\n",
                 method.c_str(), compress::scheme_text(scheme).c_str(), st.n_tensors,
                 st.n_method, st.n_override, st.n_fallback,
                 st.quantized_weights ? 8.0 * st.quantized_bytes / st.quantized_weights : 0.0,
                 st.bytes_in / 1048576.0, st.bytes_out / 1048576.0, timer.seconds(), pool.size(),
                 out.c_str());
    if (is_gptq) {
      std::fprintf(stderr, "quantize: mean relative output error on the calibration inputs: "
                   "gptq %.4g, rtn %.4g\n", st.mean_rel_error, st.mean_rel_error_base);
    }
    return 0;
  });
}

}  // namespace squeeze::cli
