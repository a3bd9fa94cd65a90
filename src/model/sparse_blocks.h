// The activation-sparsity variants of the projection steps (model/blocks.h's LayerBlocks):
// TEAL (thresholds at the inputs of q/k/v, o, gate/up and down) and the gate cut (CATS,
// ReLU-fication). Internal to the model library: layer_blocks() hands them out.
#pragma once

#include "model/blocks.h"

namespace squeeze::model {

void qkv_teal(const LayerPass& p);
void attn_output_teal(const LayerPass& p);
void mlp_teal(const LayerPass& p);
// CATS / ReLU: gate decides which neurons stay; up's kept rows and down's kept columns.
void mlp_gate_cut(const LayerPass& p);

}  // namespace squeeze::model
