#include "model/arch.h"

#include <cctype>

#include "model/gemma3.h"
#include "model/llama.h"
#include "model/qwen.h"

namespace squeeze::model {

namespace {

const Arch* const kArchs[] = {&kLlamaArch, &kGemma3Arch, &kQwen2Arch, &kQwen3Arch, &kQwen3MoeArch};

}  // namespace

int64_t width(const HParams& hp, Width w) {
  switch (w) {
    case Width::Embd: return hp.n_embd;
    case Width::Q: return hp.n_head * hp.head_dim;
    case Width::Kv: return hp.n_head_kv * hp.head_dim;
    case Width::Ff: return hp.n_ff;
  }
  return 0;
}

const Arch* find_arch(std::string_view name) {
  for (const Arch* a : kArchs) {
    if (a->name == name) return a;
  }
  return nullptr;
}

std::string supported_archs() {
  std::string s;
  for (const Arch* a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a->name);
  return s;
}

int64_t layer_of_name(std::string_view name, size_t& dot) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  const size_t end = name.find('.', kPrefix.size());
  if (end == std::string_view::npos || end == kPrefix.size() || end - kPrefix.size() > 9) return -1;
  int64_t il = 0;
  for (size_t i = kPrefix.size(); i < end; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
    il = il * 10 + (name[i] - '0');
  }
  dot = end;
  return il;
}

const LayerMatrix* find_layer_matrix(const Arch& arch, std::string_view name, int64_t& layer) {
  layer = -1;
  size_t dot = 0;
  const int64_t il = layer_of_name(name, dot);
  if (il < 0) return nullptr;
  const std::string_view rest = name.substr(dot + 1);
  for (const LayerMatrix& lm : arch.layer_matrices) {
    if (rest == lm.suffix) {
      layer = il;
      return &lm;
    }
  }
  return nullptr;
}

}  // namespace squeeze::model
