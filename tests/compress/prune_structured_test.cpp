// Structured FFN pruning against a reference built from other parts: the smaller model computes
// what the original computes with the removed neurons silenced (their ffn_gate rows zeroed), up
// to ffn_down's storage again as q8_0; the neurons removed are the lowest by the criterion,
// computed here from the decoded weights; the gate and up rows kept are the source's bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "compress/output.h"
#include "compress/prune_structured.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/format.h"
#include "gguf/gguf.h"
#include "model/context.h"
#include "model/model.h"
#include "model/names.h"
#include "calib/calib.h"
#include "tokenizer/tokenizer.h"
#include "logits_compare.h"
#include "tiny_model.h"

namespace squeeze::compress {
namespace {

namespace fs = std::filesystem;
using testing::expect_same_logits;
using formats::DType;

std::vector<float> decoded(const gguf::TensorInfo& t) {
  const int64_t cols = t.shape[0], rows = t.n_elements / cols;
  std::vector<float> w(static_cast<size_t>(t.n_elements));
  const size_t rb = formats::row_bytes(t.type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    formats::kernels(t.type, Isa::Scalar)
        .dequantize_row(static_cast<const uint8_t*>(t.data) + r * rb, w.data() + r * cols, cols);
  }
  return w;
}

TEST(PruneStructured, SmallerModelIsTheOriginalWithTheNeuronsSilenced) {
  const fs::path dir = fs::temp_directory_path() / ("squeeze_ffn_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string src_path = (dir / "tiny.gguf").string(), out_path = (dir / "ffn.gguf").string();
  testing::write_tiny_model(src_path);
  ThreadPool pool(2);
  StructuredPruneOptions o;
  o.criterion = Criterion::Magnitude;
  o.fraction = 0.5;
  const StructuredPruneStats st = prune_structured(src_path, out_path, o, pool);
  const gguf::File src = gguf::File::open(src_path), out = gguf::File::open(out_path);
  const int64_t n_ff = st.units_before, kept = st.units_after, n_embd = src.find_tensor("blk.0.ffn_gate.weight")->shape[0];
  EXPECT_EQ(kept, n_ff / 2);
  EXPECT_EQ(out.require_int("llama.feed_forward_length"), kept);
  EXPECT_EQ(out.require_string("squeeze.pruning.structure"), "ffn");

  std::vector<uint8_t> silenced(src.file_data(), src.file_data() + src.file_size());
  const int64_t n_layer = src.require_int("llama.block_count");
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const gguf::TensorInfo& g = *src.find_tensor(p + "ffn_gate.weight");
    const gguf::TensorInfo& og = *out.find_tensor(p + "ffn_gate.weight");
    ASSERT_EQ(og.shape, (std::vector<int64_t>{n_embd, kept}));
    EXPECT_EQ(out.find_tensor(p + "ffn_down.weight")->shape, (std::vector<int64_t>{kept, n_embd}));
    // The criterion, from the decoded weights: the kept neurons are the top half.
    const std::vector<float> gw = decoded(g), uw = decoded(*src.find_tensor(p + "ffn_up.weight")),
                             dw = decoded(*src.find_tensor(p + "ffn_down.weight"));
    std::vector<double> score(static_cast<size_t>(n_ff), 0.0);
    for (int64_t j = 0; j < n_ff; ++j) {
      for (int64_t k = 0; k < n_embd; ++k) score[j] += std::fabs(gw[j * n_embd + k]) + std::fabs(uw[j * n_embd + k]);
      for (int64_t i = 0; i < n_embd; ++i) score[j] += std::fabs(dw[i * n_ff + j]);
    }
    std::vector<int64_t> order(static_cast<size_t>(n_ff));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
    std::vector<int64_t> keep(order.begin(), order.begin() + kept);
    std::sort(keep.begin(), keep.end());
    const size_t rb = formats::row_bytes(g.type, n_embd);
    for (int64_t r = 0; r < kept; ++r) {
      ASSERT_EQ(0, std::memcmp(static_cast<const uint8_t*>(og.data) + r * rb,
                               static_cast<const uint8_t*>(g.data) + keep[r] * rb, rb))
          << p << " row " << r;
    }
    // The reference: the removed neurons' gate rows zeroed (silu(0) * up = 0).
    const size_t off = static_cast<const uint8_t*>(g.data) - src.file_data();
    for (int64_t j = 0, r = 0; j < n_ff; ++j) {
      if (r < kept && keep[r] == j) {
        ++r;
        continue;
      }
      std::memset(silenced.data() + off + j * rb, 0, rb);
    }
  }
  const auto small = model::Model::load(out_path);
  const auto reference = model::Model::load(gguf::File::from_bytes("silenced", silenced));
  expect_same_logits(*small, *reference, pool, 0.02f);
  fs::remove_all(dir);
}

// The source's bytes with `n` bytes at `offset` of tensor `name` zeroed (q8_0: zero quants
// and zero scales are exact zeros).
void zero_bytes(std::vector<uint8_t>& file, const gguf::File& src, const std::string& name,
                size_t offset, size_t n) {
  const gguf::TensorInfo& t = *src.find_tensor(name);
  const size_t off = static_cast<const uint8_t*>(t.data) - src.file_data();
  ASSERT_LE(offset + n, t.n_bytes);
  std::memset(file.data() + off + offset, 0, n);
}

struct Dir {
  fs::path path;
  explicit Dir(const std::string& tag)
      : path(fs::temp_directory_path() / ("squeeze_" + tag + "_" + std::to_string(::getpid()))) {
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

// Options removing half the units by `c`, calibrated on 3 windows of 32 tokens of a text
// written at `text`.
StructuredPruneOptions calibrated(Structure s, Criterion c, const std::string& text) {
  std::ofstream f(text);
  for (int i = 0; i < 40; ++i) f << "the quick brown fox " << i << " jumps over the lazy dog. ";
  StructuredPruneOptions o;
  o.structure = s;
  o.criterion = c;
  o.fraction = 0.5;
  o.calib_path = text;
  o.calib_samples = 3;
  o.calib_ctx = 32;
  return o;
}

// Removing KV groups: the smaller model computes what the original computes with the removed
// heads' attn_output columns zeroed (their outputs silenced); the group kept is the one of
// larger Σ|w| over its q/k/v rows and output columns. head_dim 32 keeps attn_output's q8_0
// blocks (copied); qwen2's head_dim 16 splits them (stored again) and slices q/k/v biases.
TEST(PruneStructured, HeadsSmallerModelIsTheOriginalWithTheHeadsSilenced) {
  for (const std::string arch : {"llama", "qwen2"}) {
    SCOPED_TRACE(arch);
    const Dir dir("heads");
    testing::TinyModelSpec spec = testing::tiny_arch_spec(arch);
    spec.matrix_type = DType::Q8_0;
    if (arch == "llama") spec.head_dim = 32;
    const std::string src_path = dir / "tiny.gguf", out_path = dir / "heads.gguf";
    testing::write_tiny_model(src_path, spec);
    ThreadPool pool(2);
    StructuredPruneOptions o;
    o.structure = Structure::Heads;
    o.fraction = 0.5;
    const StructuredPruneStats st = prune_structured(src_path, out_path, o, pool);
    EXPECT_EQ(st.units_before, 2);
    EXPECT_EQ(st.units_after, 1);
    const gguf::File src = gguf::File::open(src_path), out = gguf::File::open(out_path);
    const std::string a = arch + ".attention.";
    const int64_t hd = src.get_int(a + "key_length").value_or(spec.n_embd / spec.n_head);
    const int64_t n_head = spec.n_head, rep = n_head / spec.n_head_kv, n_embd = spec.n_embd;
    EXPECT_EQ(out.require_int(a + "head_count"), n_head / 2);
    EXPECT_EQ(out.require_int(a + "head_count_kv"), 1);
    EXPECT_EQ(out.require_int(a + "key_length"), hd);
    std::vector<uint8_t> silenced(src.file_data(), src.file_data() + src.file_size());
    for (int64_t il = 0; il < spec.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      const std::vector<float> q = decoded(*src.find_tensor(p + "attn_q.weight")),
                               k = decoded(*src.find_tensor(p + "attn_k.weight")),
                               v = decoded(*src.find_tensor(p + "attn_v.weight")),
                               w_o = decoded(*src.find_tensor(p + "attn_output.weight"));
      double score[2] = {0, 0};
      for (int64_t g = 0; g < 2; ++g) {
        for (int64_t r = g * rep * hd; r < (g + 1) * rep * hd; ++r) {
          for (int64_t c = 0; c < n_embd; ++c) score[g] += std::fabs(q[r * n_embd + c]);
        }
        for (int64_t r = g * hd; r < (g + 1) * hd; ++r) {
          for (int64_t c = 0; c < n_embd; ++c) score[g] += std::fabs(k[r * n_embd + c]) + std::fabs(v[r * n_embd + c]);
        }
        for (int64_t i = 0; i < n_embd; ++i) {
          for (int64_t c = g * rep * hd; c < (g + 1) * rep * hd; ++c) score[g] += std::fabs(w_o[i * n_head * hd + c]);
        }
      }
      const int64_t gone = score[0] >= score[1] ? 1 : 0;
      // Zero the removed heads' columns of every attn_output row (q8_0: 2-byte scale, 32 quants).
      const size_t rb = formats::row_bytes(DType::Q8_0, n_head * hd);
      for (int64_t i = 0; i < n_embd; ++i) {
        for (int64_t c = gone * rep * hd; c < (gone + 1) * rep * hd; ++c) {
          zero_bytes(silenced, src, p + "attn_output.weight", i * rb + (c / 32) * 34 + 2 + c % 32, 1);
        }
      }
      EXPECT_EQ(out.find_tensor(p + "attn_q.weight")->shape, (std::vector<int64_t>{n_embd, rep * hd}));
      EXPECT_EQ(out.find_tensor(p + "attn_output.weight")->shape, (std::vector<int64_t>{rep * hd, n_embd}));
      EXPECT_EQ(out.find_tensor(p + "attn_output.weight")->type, DType::Q8_0);
    }
    const auto small = model::Model::load(out_path);
    const auto reference = model::Model::load(gguf::File::from_bytes("silenced", silenced));
    // Copied blocks: the same arithmetic; stored again: within q8_0's rounding.
    expect_same_logits(*small, *reference, pool, arch == "llama" ? 1e-5f : 0.02f);
  }
}

// Removing layers: the smaller model computes what the original computes with the removed
// layers made identities (attn_output and ffn_down zeroed: the residual passes unchanged);
// the layers removed are those of lowest block influence, recorded in the metadata.
TEST(PruneStructured, LayersSmallerModelIsTheOriginalWithTheLayersSkipped) {
  const Dir dir("layers");
  testing::TinyModelSpec spec;
  spec.n_layer = 4;
  const std::string src_path = dir / "tiny.gguf", out_path = dir / "layers.gguf", text = dir / "calib.txt";
  testing::write_tiny_model(src_path, spec);
  ThreadPool pool(2);
  const StructuredPruneOptions o = calibrated(Structure::Layers, Criterion::BlockInfluence, text);
  const StructuredPruneStats st = prune_structured(src_path, out_path, o, pool);
  ASSERT_EQ(st.layers_removed.size(), 2u);
  const gguf::File src = gguf::File::open(src_path), out = gguf::File::open(out_path);
  EXPECT_EQ(out.require_int("llama.block_count"), 2);
  const std::vector<float> bi = out.get_float_array("squeeze.pruning.block_influence");
  ASSERT_EQ(bi.size(), 4u);
  std::vector<uint8_t> silenced(src.file_data(), src.file_data() + src.file_size());
  for (int64_t il = 0; il < 4; ++il) {
    const bool gone = std::find(st.layers_removed.begin(), st.layers_removed.end(), il) != st.layers_removed.end();
    for (int64_t other = 0; other < 4; ++other) {
      const bool other_gone = std::find(st.layers_removed.begin(), st.layers_removed.end(), other) != st.layers_removed.end();
      if (gone && !other_gone) {
        EXPECT_LE(bi[il], bi[other]) << il << " removed before " << other;
      }
    }
    if (!gone) continue;
    const std::string p = "blk." + std::to_string(il) + ".";
    for (const char* t : {"attn_output.weight", "ffn_down.weight"}) {
      zero_bytes(silenced, src, p + t, 0, src.find_tensor(p + t)->n_bytes);
    }
  }
  EXPECT_EQ(out.find_tensor("blk.2.attn_q.weight"), nullptr);
  const auto small = model::Model::load(out_path);
  const auto reference = model::Model::load(gguf::File::from_bytes("silenced", silenced));
  expect_same_logits(*small, *reference, pool, 1e-5f);
}

// FLAP on neurons: the kept neurons are those of largest Var(act) · ‖down column‖², with the
// statistics computed here through the model's callback on the same calibration samples; the
// removed ones' mean contribution is in ffn_down.bias; and the smaller model computes what the
// original computes with the removed neurons silenced and that bias added (which also checks
// that the forward pass reads ffn_down.bias).
TEST(PruneStructured, FlapKeepsTheLargestFluctuationAndCompensatesTheMean) {
  const Dir dir("flap");
  const std::string src_path = dir / "tiny.gguf", out_path = dir / "flap.gguf", text = dir / "calib.txt";
  testing::write_tiny_model(src_path);
  ThreadPool pool(2);
  const StructuredPruneOptions o = calibrated(Structure::Ffn, Criterion::Flap, text);
  const StructuredPruneStats st = prune_structured(src_path, out_path, o, pool);
  const gguf::File src = gguf::File::open(src_path), out = gguf::File::open(out_path);
  const int64_t n_ff = st.units_before, kept = st.units_after, n_layer = src.require_int("llama.block_count");
  const int64_t n_embd = src.require_int("llama.embedding_length");
  ASSERT_EQ(kept, n_ff / 2);

  // The statistics, through the dense model's callback.
  const auto dense = model::Model::load(src_path);
  const tokenizer::Tokenizer tok(tokenizer::read_vocab(src));
  std::ifstream in(text);
  const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const calib::CalibSamples samples = calib::sample_calibration_text(body, tok, 3, 32, 0);
  std::vector<std::vector<double>> sum(n_layer, std::vector<double>(n_ff)), sq = sum;
  model::Context ctx(*dense, 32, pool, 32);
  ctx.set_callback([&](std::string_view name, int layer, const float* x, int64_t rows, int64_t width) {
    if (name != model::names::kFfnAct) return;
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t j = 0; j < width; ++j) {
        sum[layer][j] += x[t * width + j];
        sq[layer][j] += static_cast<double>(x[t * width + j]) * x[t * width + j];
      }
    }
  });
  for (const auto& sample : samples.samples) {
    ctx.reset();
    ctx.decode_from(sample, 32);
  }
  std::vector<uint8_t> silenced(src.file_data(), src.file_data() + src.file_size());
  for (int64_t il = 0; il < n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const std::vector<float> d = decoded(*src.find_tensor(p + "ffn_down.weight"));
    std::vector<double> score(n_ff), mean(n_ff);
    for (int64_t j = 0; j < n_ff; ++j) {
      mean[j] = sum[il][j] / (3 * 32);
      double w2 = 0;
      for (int64_t i = 0; i < n_embd; ++i) w2 += static_cast<double>(d[i * n_ff + j]) * d[i * n_ff + j];
      score[j] = (sq[il][j] / (3 * 32) - mean[j] * mean[j]) * w2;
    }
    std::vector<int64_t> order(n_ff);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
    std::vector<uint8_t> keep(n_ff, 0);
    for (int64_t r = 0; r < kept; ++r) keep[order[r]] = 1;
    const gguf::TensorInfo& g = *src.find_tensor(p + "ffn_gate.weight");
    const size_t rb = formats::row_bytes(g.type, n_embd);
    for (int64_t j = 0, r = 0; j < n_ff; ++j) {
      if (keep[j]) {
        EXPECT_EQ(0, std::memcmp(static_cast<const uint8_t*>(out.find_tensor(p + "ffn_gate.weight")->data) + r++ * rb,
                                 static_cast<const uint8_t*>(g.data) + j * rb, rb)) << p << " neuron " << j;
      } else {
        zero_bytes(silenced, src, p + "ffn_gate.weight", j * rb, rb);
      }
    }
    const gguf::TensorInfo* bias = out.find_tensor(p + "ffn_down.bias");
    ASSERT_NE(bias, nullptr);
    ASSERT_EQ(bias->type, DType::F32);
    for (int64_t i = 0; i < n_embd; ++i) {
      double b = 0;
      for (int64_t j = 0; j < n_ff; ++j) b += keep[j] ? 0.0 : d[i * n_ff + j] * mean[j];
      EXPECT_NEAR(static_cast<const float*>(bias->data)[i], b, 1e-4 + 1e-3 * std::fabs(b)) << p << " row " << i;
    }
  }
  // The reference: the silenced original with the output's biases.
  const gguf::File sil = gguf::File::from_bytes("silenced", silenced);
  gguf::Writer w(sil.alignment());
  w.copy_metadata(sil);
  for (const gguf::TensorInfo& t : sil.tensors()) {
    w.add_tensor(t.name, t.type, t.shape, {static_cast<const uint8_t*>(t.data), t.n_bytes});
    if (t.name.ends_with("ffn_down.weight")) {
      const gguf::TensorInfo& b = *out.find_tensor(t.name.substr(0, t.name.size() - 6) + "bias");
      w.add_tensor(b.name, b.type, b.shape, {static_cast<const uint8_t*>(b.data), b.n_bytes});
    }
  }
  const auto small = model::Model::load(out_path);
  const std::vector<uint8_t> ref_bytes = w.to_bytes();
  const auto reference = model::Model::load(gguf::File::from_bytes("reference", ref_bytes));
  expect_same_logits(*small, *reference, pool, 0.02f);
  // The forward pass adds ffn_down.bias: layer 0's FFN output with it is the one without plus
  // the bias, row by row.
  const auto plain = model::Model::load(gguf::File::from_bytes("silenced", silenced));
  const auto ffn_out0 = [&](const model::Model& m) {
    std::vector<float> y;
    model::Context c(m, 16, pool, 1);
    c.set_callback([&](std::string_view name, int layer, const float* x, int64_t rows, int64_t width) {
      if (name == model::names::kFfnOut && layer == 0) y.assign(x, x + rows * width);
    });
    c.decode(std::vector<int32_t>{5, 70, 100});
    return y;
  };
  const std::vector<float> with = ffn_out0(*reference), without = ffn_out0(*plain);
  const float* b0 = static_cast<const float*>(out.find_tensor("blk.0.ffn_down.bias")->data);
  ASSERT_EQ(with.size(), without.size());
  ASSERT_FALSE(with.empty());
  for (size_t i = 0; i < with.size(); ++i) EXPECT_NEAR(with[i], without[i] + b0[i % n_embd], 1e-5f) << i;
}

TEST(PruneStructured, UnitsKeptAndBadOptions) {
  EXPECT_EQ(ffn_width_kept(1536, 1.0 / 3), 1024);
  EXPECT_EQ(ffn_width_kept(1536, 0.99), 32);
  EXPECT_THROW(ffn_width_kept(128, 0.01), UsageError);
  EXPECT_EQ(units_kept(3, 1.0 / 3, "KV groups"), 2);
  EXPECT_EQ(units_kept(30, 0.27, "layers"), 22);
  EXPECT_EQ(units_kept(3, 0.99, "KV groups"), 1);
  EXPECT_THROW(units_kept(3, 0.1, "KV groups"), UsageError);
  EXPECT_EQ(parse_structure("heads"), Structure::Heads);
  EXPECT_THROW(parse_structure("rows"), UsageError);
  ThreadPool pool(1);
  StructuredPruneOptions o;
  o.criterion = Criterion::BlockInfluence;
  EXPECT_THROW(prune_structured("x.gguf", "y.gguf", o, pool), UsageError);
  o.criterion = Criterion::Magnitude;
  o.fraction = 1.0;
  EXPECT_THROW(prune_structured("x.gguf", "y.gguf", o, pool), UsageError);
}

}  // namespace
}  // namespace squeeze::compress
