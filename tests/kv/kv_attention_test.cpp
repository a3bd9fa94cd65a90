// kv::attention_decode against attention computed in double from what the quantized cache
// holds (min + code * scale of frozen blocks, or min + level * scale with a codebook; halves of
// hot ones), and its ISA twins against each other to the bit: keys per channel and per token,
// 8/4/2 bits, groups within and across heads, sinks, windows, outliers, keys before RoPE,
// codebooks and dropped heads.
#include "kv/kv_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "random.h"

namespace squeeze::kv {
namespace {

constexpr int kHead = 4, kHeadKv = 2, kDim = 32, kRow = kHeadKv * kDim, kLayers = 2;

// Column c of position p's K (kv 0) or V (kv 1) in layer il, as the cache holds it.
double held(const KvCache& c, int64_t il, int32_t cell, int kv, int64_t col) {
  const int64_t B = c.block_tokens();
  const int32_t b = cell / static_cast<int32_t>(B);
  const int64_t t = cell % B;
  if (!c.frozen(b)) return f16_to_f32(c.hot_rows(il, b)[(kv * B + t) * kRow + col]);
  const FrozenBlock f = c.frozen_block(il, b);
  const int bits = kv_bits(c.type());
  const int64_t at = t * (kRow / c.options().group) + col / c.options().group;  // per token
  const float* levels = c.levels(il, kv);
  auto value = [&](const QuantParams& p, uint32_t code) {
    const double x = levels != nullptr ? levels[code] : static_cast<double>(code);
    return static_cast<double>(f16_to_f32(p.min)) + x * f16_to_f32(p.scale);
  };
  double delta = 0;  // an outlier's difference from its code
  for (const Outlier* e = kv == 0 ? f.k_out : f.v_out, *last = e + f.n_out; e != last; ++e) {
    if (e->t == t && e->c == col) delta += f16_to_f32(e->delta);
  }
  if (kv == 1) return delta + value(f.v_params[at], code_at(f.v_codes + t * f.v_stride, col, bits));
  if (c.options().k_axis == KeyAxis::Channel) {
    return delta + value(f.k_params[col], code_at(f.k_codes + col * f.k_stride, t, bits));
  }
  return delta + value(f.k_params[at], code_at(f.k_codes + t * f.k_stride, col, bits));
}

// Keys before RoPE: the rotation the test's caches use.
const ops::Rope kRope(kDim, 10000.0f, ops::RopeLayout::Norm);

// Head hk's key at cell, as attention must see it: what the cache holds, rotated to the cell's
// position when its codes are from before RoPE.
std::vector<double> key(const KvCache& c, int64_t il, int32_t cell, int hk) {
  std::vector<float> k(kDim);
  for (int d = 0; d < kDim; ++d) k[d] = static_cast<float>(held(c, il, cell, 0, hk * kDim + d));
  if (c.options().k_prerope && c.frozen(cell / static_cast<int32_t>(c.block_tokens()))) {
    kRope.apply(k.data(), 1, kDim, c.cell_pos(cell));
  }
  return {k.begin(), k.end()};
}

std::vector<double> reference(const ops::AttentionShape& shape, const KvCache& c, int64_t il,
                              const ops::DecodeQuery& q) {
  std::vector<double> out(kHead * kDim, 0.0);
  const int64_t lo = shape.window > 0 ? std::max<int64_t>(0, q.pos + 1 - shape.window) : 0;
  for (int h = 0; h < kHead; ++h) {
    if (q.head_keep != nullptr && q.head_keep[h] == 0) continue;
    const int hk = h / (kHead / kHeadKv);
    std::vector<double> s;
    double mx = -1e300;
    for (int64_t j = lo; j <= q.pos; ++j) {
      const std::vector<double> k = key(c, il, q.kv.cells[j], hk);
      double dot = 0;
      for (int d = 0; d < kDim; ++d) dot += q.q[h * kDim + d] * k[d];
      s.push_back(shape.scale * dot);
      mx = std::max(mx, s.back());
    }
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int64_t j = lo; j <= q.pos; ++j) {
      for (int d = 0; d < kDim; ++d) {
        out[h * kDim + d] += s[j - lo] / sum * held(c, il, q.kv.cells[j], 1, hk * kDim + d);
      }
    }
  }
  return out;
}

// A codebook of kLayers layers whose levels are off the uniform grid by up to 0.3.
KvCodebook test_codebook(int bits) {
  KvCodebook cb;
  cb.bits = bits;
  cb.n_layer = kLayers;
  for (int h = 0; h < kLayers * 2; ++h) {
    for (int c = 0; c < (1 << bits); ++c) {
      const float top = static_cast<float>((1 << bits) - 1);
      cb.levels.push_back(std::clamp(static_cast<float>(c) + 0.3f * std::sin(static_cast<float>(3 * c + h)), 0.0f, top));
    }
  }
  return cb;
}

struct Case {
  KvOptions opt;
  int64_t window;
};

TEST(KvAttention, MatchesAttentionOverWhatTheCacheHoldsAndTwinsAgree) {
  const std::vector<Case> cases = {
      {{KvType::Q4, KeyAxis::Channel, 16, 24, 0}, 0},
      {{KvType::Q4, KeyAxis::Channel, 64, 64, 0}, 0},  // blocks of 64, one value group a row
      {{KvType::Q2, KeyAxis::Channel, 32, 0, 8}, 0},
      {{KvType::Q8, KeyAxis::Channel, 8, 40, 0}, 50},
      {{KvType::Q4, KeyAxis::Token, 16, 16, 16}, 0},
      {{KvType::Q2, KeyAxis::Token, 64, 0, 0}, 0},   // a value group spans both kv heads
      {{KvType::Q8, KeyAxis::Token, 32, 32, 0}, 70},
      {{KvType::Q2, KeyAxis::Channel, 32, 0, 0, 0.02}, 0},  // outliers kept aside
      {{KvType::Q4, KeyAxis::Token, 16, 16, 0, 0.05}, 40},
      {{KvType::Q4, KeyAxis::Channel, 16, 24, 0, 0, true}, 0},  // keys before RoPE
      {{KvType::Q2, KeyAxis::Channel, 32, 0, 8, 0.02, true}, 50},
      {{KvType::Q4, KeyAxis::Token, 16, 16, 0, 0.02, true}, 0},
      {{KvType::Q4, KeyAxis::Channel, 16, 24, 0, 0, false, true}, 0},  // codebooks
      {{KvType::Q2, KeyAxis::Channel, 32, 0, 8, 0.02, false, true}, 0},
      {{KvType::Q4, KeyAxis::Token, 16, 16, 0, 0, false, true}, 40},
      {{KvType::Q2, KeyAxis::Channel, 32, 0, 8, 0, true, true}, 0},
  };
  const uint8_t keep[kHead] = {1, 0, 1, 1};
  // Two threads: units of one head; one thread: of both heads of a GQA group.
  for (const int threads : {2, 1})
  for (const Case& k : cases) {
    ThreadPool pool(threads);
    KvCache c(kLayers, kRow, 512, 2, k.opt);
    if (k.opt.k_prerope) c.set_key_rope({kRope, kRope}, kDim);
    if (k.opt.codebook) c.set_codebook(test_codebook(kv_bits(k.opt.type)));
    // Two sequences of 150 and 77 tokens, written in chunks as a context writes them.
    const int64_t lens[2] = {150, 77};
    for (int64_t seq = 0; seq < 2; ++seq) {
      for (int64_t done = 0; done < lens[seq];) {
        const int64_t n = std::min<int64_t>(37, lens[seq] - done);
        ASSERT_TRUE(c.prepare(seq, n));
        std::vector<int32_t> tokens(static_cast<size_t>(n), 1);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t il = 0; il < kLayers; ++il) {
            const auto seed = static_cast<uint32_t>(10000 * seq + 100 * (done + i) + il);
            const std::vector<float> kr = testing::randn(kRow, seed, 2.0f), vr = testing::randn(kRow, seed + 7);
            c.store(il, c.cell(seq, done + i), kr.data(), vr.data());
          }
        }
        c.commit(seq, tokens);
        done += n;
      }
    }
    std::vector<int32_t> cells0, cells1;
    c.cells(0, 150, cells0);
    c.cells(1, 77, cells1);
    const ops::AttentionShape shape{kHead, kHeadKv, kDim, 1.0f / std::sqrt(static_cast<float>(kDim)), k.window};
    const std::vector<float> q = testing::randn(2 * kHead * kDim, 99);
    std::vector<float> want_out;
    for (const Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (!cpu_supports(isa)) continue;
      for (int64_t il = 0; il < kLayers; ++il) {
        std::vector<float> out(2 * kHead * kDim, -1.0f);
        const std::vector<ops::DecodeQuery> queries = {
            {q.data(), 149, {nullptr, nullptr, kRow, cells0}, out.data(), nullptr},
            {q.data() + kHead * kDim, 76, {nullptr, nullptr, kRow, cells1}, out.data() + kHead * kDim, keep}};
        std::vector<float> scratch;
        attention_decode(shape, c, il, queries, pool, scratch, isa);
        for (size_t i = 0; i < queries.size(); ++i) {
          const std::vector<double> want = reference(shape, c, il, queries[i]);
          for (int j = 0; j < kHead * kDim; ++j) {
            ASSERT_NEAR(queries[i].out[j], want[j], 2e-5 * (1 + std::abs(want[j])))
                << describe(k.opt) << " layer " << il << " query " << i << " column " << j;
          }
        }
        if (il == 1 && isa == Isa::Scalar) want_out = out;
        if (il == 1 && isa != Isa::Scalar) {
          EXPECT_EQ(out, want_out) << isa_name(isa) << " " << describe(k.opt);
        }
      }
    }
  }
}

TEST(KvAttention, RefusesAHalfFloatCache) {
  const KvCache c(1, kRow, 64);
  ThreadPool pool(1);
  std::vector<float> scratch;
  EXPECT_THROW(attention_decode({kHead, kHeadKv, kDim, 1.0f, 0}, c, 0, {}, pool, scratch), UsageError);
}

}  // namespace
}  // namespace squeeze::kv
