// The llama architecture family (Llama 2/3, SmolLM2, Mistral-style): hyperparameters, tensor
// manifest and the forward pass of a layer, as an entry of the architecture table.
#pragma once

#include "model/arch.h"

namespace squeeze::model {

extern const Arch kLlamaArch;

}  // namespace squeeze::model
