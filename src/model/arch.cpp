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

const LayerMatrix* find_layer_matrix(const Arch& arch, std::string_view name, int64_t& layer) {
  layer = -1;
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return nullptr;
  const size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string_view::npos || dot == kPrefix.size() || dot - kPrefix.size() > 9) {
    return nullptr;
  }
  int64_t il = 0;
  for (size_t i = kPrefix.size(); i < dot; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return nullptr;
    il = il * 10 + (name[i] - '0');
  }
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
