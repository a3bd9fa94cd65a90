#include "calib/calib.h"

#include <cblas.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <random>

#include "core/error.h"
#include "model/arch.h"
#include "model/names.h"

namespace squeeze::calib {

namespace {

// H (upper triangle) += Xᵀ X for X = [n_tokens, width] floats: one sample's product in
// float (BLAS ssyrk, sums of at most a context of terms), accumulated across samples in
// double.
void accumulate(std::vector<double>& h, const float* x, int64_t n_tokens, int64_t width,
                std::vector<float>& tmp) {
  tmp.assign(static_cast<size_t>(width * width), 0.0f);
  cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(width),
              static_cast<int>(n_tokens), 1.0f, x, static_cast<int>(width), 0.0f, tmp.data(),
              static_cast<int>(width));
  for (int64_t i = 0; i < width; ++i) {
    for (int64_t j = i; j < width; ++j) h[i * width + j] += tmp[i * width + j];
  }
}

void symmetrize(std::vector<double>& h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) h[i * n + j] = h[j * n + i];
  }
}

}  // namespace

std::string read_calibration_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read calibration text '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string fnv1a64_hex(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

CalibSamples sample_calibration_text(const std::string& text, const tokenizer::Tokenizer& tok,
                                     int64_t n_samples, int64_t ctx, uint64_t seed) {
  if (n_samples <= 0) throw UsageError("the number of calibration samples must be positive");
  if (ctx < 2) throw UsageError("the calibration context must be at least 2 tokens");
  const std::vector<int32_t> tokens = tok.encode(text, /*add_special=*/false, false);
  const auto n = static_cast<int64_t>(tokens.size());
  if (n < ctx - 1) {
    throw UsageError("the calibration text has " + std::to_string(n) +
                     " tokens, fewer than one sample of " + std::to_string(ctx));
  }
  CalibSamples out;
  out.text_hash = fnv1a64_hex(text);
  out.text_tokens = n;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> start(0, n - (ctx - 1));
  const int32_t bos = tok.bos();
  for (int64_t s = 0; s < n_samples; ++s) {
    const int64_t at = start(rng);
    std::vector<int32_t> sample;
    sample.reserve(ctx);
    sample.push_back(bos >= 0 ? bos : tokens[at]);
    sample.insert(sample.end(), tokens.begin() + at, tokens.begin() + at + ctx - 1);
    out.samples.push_back(std::move(sample));
  }
  return out;
}

Calibrator::Calibrator(const model::Model& m, std::vector<std::vector<int32_t>> samples,
                       ThreadPool& pool)
    : model_(m),
      samples_(std::move(samples)),
      pool_(pool),
      ctx_(samples_.empty() ? 0 : static_cast<int64_t>(samples_[0].size())),
      kv_(model::make_kv_cache(m.hparams(), std::max<int64_t>(ctx_, 1))),
      scratch_(m.hparams(), std::max<int64_t>(ctx_, 1)) {
  const int64_t n_embd = m.hparams().n_embd;
  for (const auto& s : samples_) {
    if (static_cast<int64_t>(s.size()) != ctx_) throw Error("calibration samples differ in length");
  }
  hidden_.resize(static_cast<size_t>(n_samples() * ctx_ * n_embd));
  for (int64_t s = 0; s < n_samples(); ++s) {
    model::embed(m, samples_[s], hidden_.data() + s * ctx_ * n_embd);
  }
  openblas_set_num_threads(pool.size());
}

const std::vector<double>& BlockHessians::of(std::string_view input) const {
  for (const Entry& e : entries) {
    if (e.input == input) return e.h;
  }
  throw Error("no Hessian of '" + std::string(input) + "' was collected");
}

bool Calibrator::collect(int64_t il, BlockHessians& out,
                         const std::function<void(int64_t, int64_t)>& progress,
                         const std::atomic<bool>* cancel) {
  const model::HParams& hp = model_.hparams();
  const int64_t n_embd = hp.n_embd;
  out.entries.clear();
  for (const model::LayerMatrix& lm : model_.arch().layer_matrices) {
    bool seen = false;
    for (const auto& e : out.entries) seen = seen || e.input == lm.input;
    if (seen) continue;
    const int64_t w = model::width(hp, lm.n_in);
    out.entries.push_back({lm.input, w, std::vector<double>(static_cast<size_t>(w * w), 0.0)});
  }
  out.n_tokens = 0;
  std::vector<float> tmp;
  const model::TensorCallback cb = [&](std::string_view name, int, const float* data,
                                       int64_t rows, int64_t width) {
    for (auto& e : out.entries) {
      if (e.input == name) accumulate(e.h, data, rows, width, tmp);
    }
  };
  for (int64_t s = 0; s < n_samples(); ++s) {
    if (cancel != nullptr && cancel->load()) return false;
    std::memcpy(scratch_.x.data(), hidden_.data() + s * ctx_ * n_embd,
                sizeof(float) * static_cast<size_t>(ctx_ * n_embd));
    model::forward_layer(model_, il, kv_, scratch_, pool_, ctx_, 0, &cb);
    out.n_tokens += ctx_;
    if (progress) progress(s + 1, n_samples());
  }
  for (auto& e : out.entries) symmetrize(e.h, e.width);
  return true;
}

bool Calibrator::advance(int64_t il, const std::function<void(int64_t, int64_t)>& progress,
                         const std::atomic<bool>* cancel) {
  const int64_t n_embd = model_.hparams().n_embd;
  for (int64_t s = 0; s < n_samples(); ++s) {
    if (cancel != nullptr && cancel->load()) return false;
    float* h = hidden_.data() + s * ctx_ * n_embd;
    std::memcpy(scratch_.x.data(), h, sizeof(float) * static_cast<size_t>(ctx_ * n_embd));
    model::forward_layer(model_, il, kv_, scratch_, pool_, ctx_, 0, nullptr);
    std::memcpy(h, scratch_.x.data(), sizeof(float) * static_cast<size_t>(ctx_ * n_embd));
    if (progress) progress(s + 1, n_samples());
  }
  return true;
}

bool Calibrator::for_each_block(
    const std::function<void(int64_t il, const BlockHessians& h)>& apply,
    const BlockProgress& progress, const std::atomic<bool>* cancel) {
  const int64_t n_layer = model_.hparams().n_layer;
  BlockHessians hs;
  for (int64_t il = 0; il < n_layer; ++il) {
    auto report = [&](const char* phase) -> std::function<void(int64_t, int64_t)> {
      if (!progress) return nullptr;
      return [&, phase](int64_t done, int64_t total) { progress(il, phase, done, total); };
    };
    if (!collect(il, hs, report("hessians"), cancel)) return false;
    apply(il, hs);
    if (il + 1 < n_layer && !advance(il, report("forward"), cancel)) return false;
  }
  return true;
}

}  // namespace squeeze::calib
