// Qwen 2 and Qwen 3: the llama layer with NEOX RoPE; Qwen 2 with q/k/v biases, Qwen 3 with
// per-head QK-norm (model/llama.h's family loader and layer); Qwen 3 MoE: Qwen 3's attention
// with a routed MLP of experts (model/blocks.h's moe_mlp).
#pragma once

#include "model/arch.h"

namespace squeeze::model {

extern const Arch kQwen2Arch;
extern const Arch kQwen3Arch;
extern const Arch kQwen3MoeArch;

}  // namespace squeeze::model
