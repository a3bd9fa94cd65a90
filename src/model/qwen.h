// Qwen 2 and Qwen 3: the llama layer with NEOX RoPE; Qwen 2 with q/k/v biases, Qwen 3 with
// per-head QK-norm (model/llama.h's family loader and layer).
#pragma once

#include "model/arch.h"

namespace squeeze::model {

extern const Arch kQwen2Arch;
extern const Arch kQwen3Arch;

}  // namespace squeeze::model
