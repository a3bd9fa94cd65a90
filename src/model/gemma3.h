// The Gemma 3 architecture (text): embeddings scaled by sqrt(n_embd), sandwich norms (before and
// after attention and the MLP), QK-norm, GeGLU (tanh GELU), interleaved sliding-window (local)
// and global attention layers with their own RoPE bases, tied head.
#pragma once

#include "model/arch.h"

namespace squeeze::model {

extern const Arch kGemma3Arch;

}  // namespace squeeze::model
