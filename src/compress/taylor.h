// First-order Taylor importance of feed-forward neurons (LLM-Pruner, Ma et al., 2023): for
// neuron j of a layer, Σ |w · ∂L/∂w| over its group (its ffn_gate row, ffn_up row and ffn_down
// column), the gradients summed over every calibration token.
//
// The loss L is the next-token cross-entropy of the model's own output head applied to the
// final residual stream, with the later blocks' contributions to that stream held fixed: then
// ∂L/∂(a block's output) is ∂L/∂(final residual) for every block, which one backward pass
// through the head and the final RMS norm gives per token, and the backward pass through each
// SwiGLU block (down, the gate's SiLU, up) gives the weights' gradients. Exact for the last
// block; for earlier ones the path through the later blocks is left out (their Jacobians taken
// as the identity of the residual connection), which is what makes it one pass instead of a
// full backward pass through the model (docs/PRUNING.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"

namespace squeeze::compress {

// ∂L/∂W of every layer's ffn_gate ([n_ff, n_embd] row-major, as stored), ffn_up (likewise) and
// ffn_down ([n_embd, n_ff]), summed over every token of `samples` but the last of each (each
// sample a sequence run from an empty cache).
struct FfnGradients {
  std::vector<std::vector<float>> gate, up, down;  // [n_layer]
};

// The gradients of the llama family's dense SwiGLU layers. progress(done, total) after each
// sample. Throws UsageError for another architecture or an MoE model, Interrupted on cancel.
// Memory: the layers' gate/up/down weights and their gradients in f32, one sample's
// activations, and its logits.
FfnGradients ffn_loss_gradients(const model::Model& m, const std::vector<std::vector<int32_t>>& samples,
                                ThreadPool& pool, const std::function<void(int64_t, int64_t)>& progress,
                                const std::atomic<bool>* cancel);

// [n_layer][n_ff]: Σ |w · ∂L/∂w| over each neuron's gate row, up row and down column.
std::vector<std::vector<double>> ffn_taylor_importance(const model::Model& m, const FfnGradients& g,
                                                       ThreadPool& pool);

}  // namespace squeeze::compress
