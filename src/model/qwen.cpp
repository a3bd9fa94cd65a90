#include "model/qwen.h"

#include "model/llama.h"
#include "model/loader.h"

namespace squeeze::model {

namespace {

void load_qwen2(const gguf::File& f, HParams& hp, Model& m) {
  load_llama_family(f, hp, m, ops::RopeLayout::Neox, false);
}

void load_qwen3(const gguf::File& f, HParams& hp, Model& m) {
  load_llama_family(f, hp, m, ops::RopeLayout::Neox, true);
}

}  // namespace

const Arch kQwen2Arch{"qwen2", load_qwen2, kStandardLayerMatrices, llama_family_layer};
const Arch kQwen3Arch{"qwen3", load_qwen3, kStandardLayerMatrices, llama_family_layer};

}  // namespace squeeze::model
