#include "compress/prune_structured.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "calib/calib.h"
#include "compress/output.h"
#include "core/error.h"
#include "formats/format.h"
#include "model/arch.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/names.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::compress {

namespace {

using formats::DType;

constexpr std::string_view kPrefix = "squeeze.pruning.";

std::vector<float> decode(const gguf::TensorInfo& t, ThreadPool& pool) {
  return decode_rows(t.type, t.data, t.shape[0], tensor_rows(t), pool);
}

std::string layer_name(int64_t il, const char* suffix) {
  return "blk." + std::to_string(il) + "." + suffix;
}

}  // namespace

int64_t ffn_width_kept(int64_t n_ff, double fraction) {
  const double kept = (1.0 - fraction) * static_cast<double>(n_ff) / 32.0;
  return std::clamp<int64_t>(std::llround(kept) * 32, 32, n_ff / 32 * 32);
}

FfnPruneStats prune_ffn_neurons(const std::string& model_path, const std::string& out_path,
                                const FfnPruneOptions& o, ThreadPool& pool) {
  if (o.method != PruneMethod::Magnitude && o.method != PruneMethod::Wanda) {
    throw UsageError("--structure ffn ranks neurons by magnitude or wanda");
  }
  if (!(o.fraction > 0.0 && o.fraction < 1.0)) throw UsageError("--sparsity must be in (0, 1)");
  auto log = [&](const std::string& line, bool transient) {
    if (o.log) o.log(line, transient);
  };
  auto check_cancel = [&] {
    if (cancelled(o.cancel)) throw Interrupted("interrupted; no output written");
  };
  std::unique_ptr<model::Model> m = model::Model::load(model_path);
  const gguf::File& src = m->file();
  const model::HParams& hp = m->hparams();
  if (hp.n_expert > 0) throw UsageError(src.path() + ": --structure ffn does not prune MoE experts");
  check_output_path(src, out_path);
  const int64_t n_layer = hp.n_layer, n_ff = hp.n_ff, n_embd = hp.n_embd;
  for (int64_t il = 0; il < n_layer; ++il) {
    for (const char* s : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) {
      if (src.find_tensor(layer_name(il, s)) == nullptr) {
        throw UsageError(src.path() + ": --structure ffn needs " + layer_name(il, s));
      }
    }
  }
  FfnPruneStats st;
  st.n_ff_before = n_ff;
  st.n_ff_after = ffn_width_kept(n_ff, o.fraction);
  if (st.n_ff_after >= n_ff) {
    throw UsageError("--sparsity " + std::to_string(o.fraction) + " removes no whole group of 32 of " +
                     std::to_string(n_ff) + " neurons");
  }

  // Input channel norms per layer (Wanda-sp): the FFN input's (n_embd) and the neurons' (n_ff).
  std::vector<std::vector<float>> in_norm(n_layer), act_norm(n_layer);
  calib::CalibSamples samples;
  if (o.method == PruneMethod::Wanda) {
    const std::string text = calib::read_calibration_text(o.calib_path);
    if (o.calib_ctx > hp.n_ctx_train) {
      throw UsageError("--calib-ctx " + std::to_string(o.calib_ctx) + " exceeds the model's " +
                       std::to_string(hp.n_ctx_train) + " tokens");
    }
    tokenizer::Tokenizer tok(tokenizer::read_vocab(src));
    samples = calib::sample_calibration_text(text, tok, o.calib_samples, o.calib_ctx, o.seed);
    log("calibration: " + std::to_string(o.calib_samples) + " samples x " +
            std::to_string(o.calib_ctx) + " tokens from " + o.calib_path, false);
    calib::Calibrator cal(*m, samples.samples, pool);
    auto diag_sqrt = [](const std::vector<double>& h, int64_t n) {
      std::vector<float> d(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) d[j] = static_cast<float>(std::sqrt(std::max(0.0, h[j * n + j])));
      return d;
    };
    const auto apply = [&](int64_t il, const calib::BlockHessians& hs) {
      in_norm[il] = diag_sqrt(hs.of(model::names::kFfnNorm), n_embd);
      act_norm[il] = diag_sqrt(hs.of(model::names::kFfnAct), n_ff);
    };
    const auto progress = [&](int64_t il, const char* phase, int64_t done, int64_t total) {
      log("block " + std::to_string(il + 1) + "/" + std::to_string(n_layer) + ": " + phase + " " +
              std::to_string(done) + "/" + std::to_string(total) + " samples", true);
    };
    if (!cal.for_each_block(apply, progress, o.cancel)) check_cancel();
  }

  // Per layer: the neurons kept (ascending), and the three new tensors.
  std::vector<std::vector<uint8_t>> data;  // gate, up, down of each layer
  for (int64_t il = 0; il < n_layer; ++il) {
    check_cancel();
    const gguf::TensorInfo& gate = *src.find_tensor(layer_name(il, "ffn_gate.weight"));
    const gguf::TensorInfo& up = *src.find_tensor(layer_name(il, "ffn_up.weight"));
    const gguf::TensorInfo& down = *src.find_tensor(layer_name(il, "ffn_down.weight"));
    const std::vector<float> g = decode(gate, pool), u = decode(up, pool), d = decode(down, pool);
    std::vector<double> score(static_cast<size_t>(n_ff), 0.0);
    const bool wanda = o.method == PruneMethod::Wanda;
    pool.parallel_for(n_ff, 16, [&](int64_t j0, int64_t j1, int) {
      for (int64_t j = j0; j < j1; ++j) {
        double s = 0.0;
        for (int64_t k = 0; k < n_embd; ++k) {
          const double nk = wanda ? in_norm[il][k] : 1.0;
          s += (std::fabs(g[j * n_embd + k]) + std::fabs(u[j * n_embd + k])) * nk;
        }
        double sd = 0.0;
        for (int64_t i = 0; i < n_embd; ++i) sd += std::fabs(d[i * n_ff + j]);
        score[j] = s + sd * (wanda ? act_norm[il][j] : 1.0);
      }
    });
    std::vector<int64_t> order(static_cast<size_t>(n_ff));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
    std::vector<int64_t> keep(order.begin(), order.begin() + st.n_ff_after);
    std::sort(keep.begin(), keep.end());
    for (const gguf::TensorInfo* t : {&gate, &up}) {
      const size_t rb = formats::row_bytes(t->type, n_embd);
      std::vector<uint8_t> out(rb * keep.size());
      for (size_t r = 0; r < keep.size(); ++r) {
        std::copy_n(static_cast<const uint8_t*>(t->data) + keep[r] * rb, rb, out.data() + r * rb);
      }
      data.push_back(std::move(out));
    }
    const size_t qrb = formats::row_bytes(DType::Q8_0, st.n_ff_after);
    std::vector<uint8_t> out(qrb * static_cast<size_t>(n_embd));
    pool.parallel_for(n_embd, 16, [&](int64_t i0, int64_t i1, int) {
      std::vector<float> row(keep.size());
      for (int64_t i = i0; i < i1; ++i) {
        for (size_t r = 0; r < keep.size(); ++r) row[r] = d[i * n_ff + keep[r]];
        formats::kernels(DType::Q8_0).quantize_row_ref(row.data(), out.data() + i * qrb, st.n_ff_after);
      }
    });
    data.push_back(std::move(out));
    log("blk." + std::to_string(il) + ": " + std::to_string(st.n_ff_after) + " of " +
            std::to_string(n_ff) + " neurons kept", false);
  }
  check_cancel();

  const std::string ff_key = model::arch_key(hp, "feed_forward_length");
  std::vector<std::string> skip_keys = {ff_key, "general.file_type"};
  for (const gguf::KeyValue& kv : src.metadata()) {
    if (kv.key.starts_with(kPrefix)) skip_keys.push_back(kv.key);
  }
  const std::vector<std::string_view> skip(skip_keys.begin(), skip_keys.end());
  gguf::Writer w(src.alignment());
  w.copy_metadata(src, skip);
  w.add_uint32(ff_key, static_cast<uint32_t>(st.n_ff_after));
  const std::string pre(kPrefix);
  w.add_string(pre + "structure", "ffn");
  w.add_string(pre + "method", std::string(prune_method_name(o.method)));
  w.add_float32(pre + "sparsity", static_cast<float>(o.fraction));
  w.add_uint32(pre + "ffn_length_before", static_cast<uint32_t>(n_ff));
  if (o.method == PruneMethod::Wanda) {
    w.add_string(pre + "calibration.file", std::filesystem::path(o.calib_path).filename().string());
    w.add_string(pre + "calibration.fnv1a64", samples.text_hash);
    w.add_uint32(pre + "calibration.samples", static_cast<uint32_t>(o.calib_samples));
    w.add_uint32(pre + "calibration.ctx", static_cast<uint32_t>(o.calib_ctx));
    w.add_uint64(pre + "calibration.seed", o.seed);
  }
  for (const gguf::TensorInfo& t : src.tensors()) {
    st.bytes_in += t.n_bytes;
    st.params_before += static_cast<uint64_t>(t.n_elements);
    // Which of a layer's gate / up / down this is, through the architecture's manifest.
    int64_t il = -1;
    const model::LayerMatrix* lm = model::find_layer_matrix(m->arch(), t.name, il);
    const std::string_view suffix = lm != nullptr ? lm->suffix : std::string_view();
    const int which = suffix == "ffn_gate.weight" ? 0 : suffix == "ffn_up.weight" ? 1
                      : suffix == "ffn_down.weight" ? 2 : -1;
    if (which < 0) {
      w.add_tensor(t.name, t.type, t.shape, {static_cast<const uint8_t*>(t.data), t.n_bytes});
      st.bytes_out += t.n_bytes;
      st.params_after += static_cast<uint64_t>(t.n_elements);
      continue;
    }
    const std::vector<uint8_t>& bytes = data[static_cast<size_t>(il * 3 + which)];
    const bool is_down = which == 2;
    const std::vector<int64_t> shape =
        is_down ? std::vector<int64_t>{st.n_ff_after, n_embd} : std::vector<int64_t>{n_embd, st.n_ff_after};
    w.add_tensor(t.name, is_down ? DType::Q8_0 : t.type, shape, bytes);
    st.bytes_out += bytes.size();
    st.params_after += static_cast<uint64_t>(st.n_ff_after * n_embd);
  }
  write_output(w, out_path, o.cancel);
  return st;
}

}  // namespace squeeze::compress
