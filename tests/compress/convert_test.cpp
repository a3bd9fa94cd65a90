// convert_rows and convert_model on the tiny model: every target type loads, stays within its
// error bound of the source, keeps 1-D tensors and metadata, sets the file type; requantizing
// reference-written weights is bit-exact; bad paths and cancellation leave nothing behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "compress/convert.h"
#include "formats/blocks.h"
#include "model/model.h"
#include "tiny_model.h"

namespace squeeze::compress {
namespace {

namespace fs = std::filesystem;
using formats::DType;

std::vector<float> decode(const gguf::TensorInfo& t) {
  std::vector<float> x(t.n_elements);
  formats::kernels(t.type, Isa::Scalar).dequantize_row(t.data, x.data(), t.n_elements);
  return x;
}

// Largest |error| allowed for an element of a block of 32 whose largest magnitude is amax:
// the format's worst-case step error (a full step where Q4_0 / Q5_0 clip the side opposite the
// largest value, half a step elsewhere) plus the rounding of the half-float scale and min.
double error_bound(DType type, double amax, double x) {
  switch (type) {
    case DType::F16: return std::fabs(x) * 0x1p-11 + 0x1p-25;
    case DType::BF16: return std::fabs(x) * 0x1p-8;
    case DType::Q8_0: return amax * (0.5 / 127 + 0x1p-10);
    case DType::Q5_0: return amax * (1.0 / 16 + 0x1p-10);
    case DType::Q4_0: return amax * (1.0 / 8 + 0x1p-10);
    case DType::Q5_1: return amax * (1.0 / 31 + 0x1p-9);
    case DType::Q4_1: return amax * (1.0 / 15 + 0x1p-9);
    default: return 0.0;
  }
}

void expect_within_bound(const gguf::TensorInfo& src, const gguf::TensorInfo& out) {
  const std::vector<float> x = decode(src), y = decode(out);
  ASSERT_EQ(x.size(), y.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    double amax = 0.0;
    for (size_t j = b; j < b + 32 && j < x.size(); ++j) amax = std::max(amax, std::fabs(double(x[j])));
    for (size_t j = b; j < b + 32 && j < x.size(); ++j) {
      ASSERT_LE(std::fabs(double(x[j]) - y[j]), error_bound(out.type, amax, x[j]))
          << out.name << " element " << j << " (" << formats::format_info(out.type).name << ")";
    }
  }
}

class ConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("squeeze_convert_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // The tiny model with float matrices (exact source values) and one matrix of 48-element rows.
  std::string float_model() {
    testing::TinyModelSpec spec;
    spec.matrix_type = DType::F32;
    spec.extra = [](gguf::Writer& w) {
      std::vector<float> v(48 * 4);
      for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i));
      const auto* p = reinterpret_cast<const uint8_t*>(v.data());
      w.add_tensor("blk.0.odd.weight", DType::F32, {48, 4}, {p, v.size() * sizeof(float)});
    };
    const std::string p = path("src_f32.gguf");
    testing::write_tiny_model(p, spec);
    return p;
  }
  ConvertStats convert(const std::string& in, const std::string& out, DType type,
                       const std::atomic<bool>* cancel = nullptr,
                       std::function<void(size_t, size_t, const TensorPlan&)> on_tensor = {}) {
    const gguf::File src = gguf::File::open(in);
    ConvertOptions opts;
    opts.target = type;
    opts.cancel = cancel;
    opts.on_tensor = std::move(on_tensor);
    return convert_model(src, out, opts, pool_);
  }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    return out;
  }
  fs::path dir_;
  ThreadPool pool_{2};
};

TEST_F(ConvertTest, EveryTypeLoadsAndStaysWithinItsBound) {
  const std::string in = float_model();
  const gguf::File src = gguf::File::open(in);
  for (const TargetType& target : target_types()) {
    const std::string name(formats::format_info(target.type).name);
    SCOPED_TRACE(name);
    const std::string out = path("out_" + name + ".gguf");
    const ConvertStats st = convert(in, out, target.type);
    EXPECT_EQ(st.n_tensors, src.tensors().size());
    const bool quantized = formats::format_info(target.type).block_size > 1;
    EXPECT_EQ(st.n_fallback, quantized ? 1u : 0u);
    ASSERT_NO_THROW(model::Model::load(out));

    const gguf::File f = gguf::File::open(out);
    ASSERT_EQ(f.tensors().size(), src.tensors().size());
    for (const gguf::TensorInfo& t : src.tensors()) {
      const gguf::TensorInfo* o = f.find_tensor(t.name);
      ASSERT_NE(o, nullptr) << t.name;
      EXPECT_EQ(o->shape, t.shape) << t.name;
      if (t.shape.size() == 1) {  // norms: untouched
        EXPECT_EQ(o->type, DType::F32);
        ASSERT_EQ(o->n_bytes, t.n_bytes);
        EXPECT_EQ(std::memcmp(o->data, t.data, t.n_bytes), 0) << t.name;
        continue;
      }
      const DType want = t.name == "blk.0.odd.weight" && quantized ? DType::F16 : target.type;
      EXPECT_EQ(o->type, want) << t.name;
      if (want == DType::F32) {
        EXPECT_EQ(std::memcmp(o->data, t.data, t.n_bytes), 0) << t.name;
      } else {
        expect_within_bound(t, *o);
      }
    }
    EXPECT_EQ(f.require_int("general.file_type"), target.llama_ftype);
    EXPECT_EQ(f.require_int("general.quantization_version"), 2);
    EXPECT_EQ(f.require_string("squeeze.quantization.method"), "rtn");
    EXPECT_EQ(f.require_string("squeeze.quantization.source_type"), "f32");
    // Every source key is kept with its value (the tiny model has no file_type of its own).
    for (const gguf::KeyValue& kv : src.metadata()) {
      const gguf::Value* v = f.find(kv.key);
      ASSERT_NE(v, nullptr) << kv.key;
      EXPECT_EQ(v->type, kv.value.type) << kv.key;
      EXPECT_EQ(v->u64, kv.value.u64) << kv.key;
      EXPECT_EQ(v->f64, kv.value.f64) << kv.key;
      EXPECT_EQ(v->str, kv.value.str) << kv.key;
      EXPECT_EQ(v->array_len, kv.value.array_len) << kv.key;
      EXPECT_EQ(v->strings, kv.value.strings) << kv.key;
    }
    EXPECT_EQ(f.metadata().size(), src.metadata().size() + 4);
  }
  EXPECT_EQ(files().size(), 1 + target_types().size());  // no temporaries left
}

// Reference-written Q8_0 and Q4_0 weights survive decode + re-encode bit for bit (the scale is
// recovered exactly from the largest code). Through the whole pipeline too: q8_0 -> f32 -> q8_0.
TEST_F(ConvertTest, RequantizingReferenceWeightsIsBitExact) {
  const std::vector<float> x = [] {
    std::vector<float> v(64 * 96);
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.71f * static_cast<float>(i)) * (1 + i % 7);
    return v;
  }();
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0}) {
    std::vector<uint8_t> a(formats::row_bytes(t, 96) * 64), b(a.size(), 0xAA);
    formats::kernels(t, Isa::Scalar).quantize_row_ref(x.data(), a.data(), static_cast<int64_t>(x.size()));
    ASSERT_TRUE(convert_rows(t, t, a.data(), b.data(), 96, 64, pool_));
    EXPECT_EQ(a, b) << formats::format_info(t).name;
  }

  const std::string q8 = path("a_q8_0.gguf"), f32 = path("b_f32.gguf"), q8b = path("c_q8_0.gguf"),
                    q8c = path("d_q8_0.gguf");
  convert(float_model(), q8, DType::Q8_0);
  convert(q8, f32, DType::F32);
  convert(f32, q8b, DType::Q8_0);
  EXPECT_EQ(convert(q8, q8c, DType::Q8_0).n_converted, 0u);  // same type: copied, like llama.cpp
  const gguf::File a = gguf::File::open(q8), b = gguf::File::open(q8b), c = gguf::File::open(q8c);
  for (const gguf::TensorInfo& t : a.tensors()) {
    for (const gguf::File* other : {&b, &c}) {
      const gguf::TensorInfo* o = other->find_tensor(t.name);
      ASSERT_NE(o, nullptr);
      ASSERT_EQ(o->n_bytes, t.n_bytes) << t.name;
      EXPECT_EQ(std::memcmp(o->data, t.data, t.n_bytes), 0) << t.name << " in " << other->path();
    }
  }
  EXPECT_EQ(c.require_string("squeeze.quantization.source_type"), "q8_0");
}

// Q8_0 weights get the reference rounding (halves away from zero), not the activation one.
TEST_F(ConvertTest, RowsUseTheReferenceQuantizer) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // d = 1: codes are round(x)
  x[1] = 2.5f;
  x[2] = -0.5f;
  formats::BlockQ8_0 y;
  ASSERT_TRUE(convert_rows(DType::F32, DType::Q8_0, x.data(), &y, 32, 1, pool_));
  EXPECT_EQ(y.qs[0], 127);
  EXPECT_EQ(y.qs[1], 3);
  EXPECT_EQ(y.qs[2], -1);
}

TEST_F(ConvertTest, RefusesTheInputAndUnwritablePaths) {
  const std::string in = float_model();
  EXPECT_THROW(convert(in, in, DType::Q8_0), UsageError);
  EXPECT_THROW(convert(in, (dir_ / "." / "src_f32.gguf").string(), DType::Q8_0), UsageError);
  EXPECT_THROW(convert(in, path("no/such/dir/out.gguf"), DType::Q8_0), UsageError);
  EXPECT_THROW(convert(in, dir_.string(), DType::Q8_0), UsageError);
  EXPECT_THROW(convert(in, "", DType::Q8_0), UsageError);
  EXPECT_THROW(convert(in, path("x.gguf"), DType::Q4_K), UsageError);
  EXPECT_EQ(files(), std::vector<std::string>{"src_f32.gguf"});
}

TEST_F(ConvertTest, ReplacesAnExistingOutputOnlyWhenDone) {
  const std::string in = float_model(), out = path("out.gguf");
  std::ofstream(out) << "old";
  std::atomic<bool> cancel{false};
  EXPECT_THROW(convert(in, out, DType::Q4_0, &cancel,
                       [&](size_t i, size_t, const TensorPlan&) { cancel = i == 5; }),
               Interrupted);
  EXPECT_EQ(fs::file_size(out), 3u);  // untouched
  EXPECT_EQ(files().size(), 2u);
  convert(in, out, DType::Q4_0);
  EXPECT_EQ(gguf::File::open(out).require_int("general.file_type"), 2);
}

TEST_F(ConvertTest, CancelLeavesNothingBehind) {
  const std::string in = float_model();
  std::atomic<bool> cancel{true};
  EXPECT_THROW(convert(in, path("out.gguf"), DType::Q8_0, &cancel), Interrupted);
  cancel = false;
  EXPECT_THROW(convert(in, path("out.gguf"), DType::Q8_0, &cancel,
                       [&](size_t i, size_t, const TensorPlan&) { cancel = i == 3; }),
               Interrupted);
  EXPECT_EQ(files(), std::vector<std::string>{"src_f32.gguf"});

  // Rows stop being converted as soon as the flag is up.
  std::vector<float> x(32 * 64, 1.0f);
  std::vector<uint8_t> y(formats::row_bytes(DType::Q8_0, 32) * 64);
  cancel = true;
  EXPECT_FALSE(convert_rows(DType::F32, DType::Q8_0, x.data(), y.data(), 32, 64, pool_, &cancel));
}

}  // namespace
}  // namespace squeeze::compress
