#include "kv/key_rope.h"

#include <utility>

#include "core/error.h"

namespace squeeze::kv {

KeyRope::KeyRope(std::vector<ops::Rope> per_layer, int64_t head_dim, int64_t row)
    : rope_(std::move(per_layer)), head_dim_(head_dim) {
  if (head_dim < 1 || row % head_dim != 0) throw UsageError("keys before RoPE: a row of whole heads");
  for (size_t il = 0; il < rope_.size(); ++il) {
    const ops::Rope& r = rope_[il];
    size_t j = 0;
    while (j < il && !(rope_[j].n_rot() == r.n_rot() && rope_[j].freq_base() == r.freq_base() &&
                       rope_[j].layout() == r.layout() && rope_[j].freq_factors() == r.freq_factors())) {
      ++j;
    }
    if (j == il) angles_.emplace_back();
    table_.push_back(j == il ? angles_.size() - 1 : table_[j]);
  }
}

void KeyRope::grow(int64_t max_pos) {
  for (size_t il = 0; il < rope_.size(); ++il) {
    std::vector<float>& a = angles_[table_[il]];
    const auto n_rot = static_cast<size_t>(rope_[il].n_rot());
    for (auto pos = static_cast<int64_t>(a.size() / n_rot); pos <= max_pos; ++pos) {
      a.resize(a.size() + n_rot);
      rope_[il].angles(pos, a.data() + a.size() - n_rot);
    }
  }
}

void KeyRope::rotate(int64_t il, float* x, int64_t n, int64_t pos, bool inverse) const {
  const ops::Rope& r = rope_[static_cast<size_t>(il)];
  const auto n_rot = static_cast<size_t>(r.n_rot());
  const float* cs = angles_[table_[static_cast<size_t>(il)]].data() + static_cast<size_t>(pos) * n_rot;
  const auto heads = static_cast<int>(n / head_dim_);
  if (!inverse) {
    r.rotate(x, heads, static_cast<int>(head_dim_), cs);
    return;
  }
  std::vector<float> back(cs, cs + n_rot);  // the opposite angles: sines negated
  for (size_t i = 1; i < n_rot; i += 2) back[i] = -back[i];
  r.rotate(x, heads, static_cast<int>(head_dim_), back.data());
}

void KeyRope::rotate_tile(int64_t il, float* x, int64_t stride, const int32_t* pos, int64_t n) const {
  const ops::Rope& r = rope_[static_cast<size_t>(il)];
  const int64_t n_rot = r.n_rot(), half = n_rot / 2;
  const float* table = angles_[table_[static_cast<size_t>(il)]].data();
  const bool norm = r.layout() == ops::RopeLayout::Norm;
  for (int64_t i = 0; i < half; ++i) {
    float* xa = x + (norm ? 2 * i : i) * stride;
    float* xb = x + (norm ? 2 * i + 1 : i + half) * stride;
    for (int64_t t = 0; t < n; ++t) {
      const float* cs = table + pos[t] * n_rot + 2 * i;
      const float x0 = xa[t], x1 = xb[t];
      xa[t] = x0 * cs[0] - x1 * cs[1];
      xb[t] = x0 * cs[1] + x1 * cs[0];
    }
  }
}

size_t KeyRope::bytes() const {
  size_t b = 0;
  for (const std::vector<float>& a : angles_) b += a.size() * sizeof(float);
  return b;
}

}  // namespace squeeze::kv
