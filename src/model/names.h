// The names of the forward pass's intermediates, as the TensorCallback receives them (llama.cpp's
// names, so a dump diffs against its own). Callers compare against these constants, never
// against string literals: a misspelt name is then a compile error, not a silent miss.
#pragma once

#include <string_view>

namespace squeeze::model::names {

// Outside the layers (layer -1).
inline constexpr std::string_view kInpEmbd = "inp_embd";          // [n, n_embd] token embeddings
inline constexpr std::string_view kResultNorm = "result_norm";    // [rows, n_embd] head input
inline constexpr std::string_view kResultOutput = "result_output";  // [rows, n_vocab] logits
// In layer il.
inline constexpr std::string_view kAttnNorm = "attn_norm";  // [n, n_embd] q/k/v input
inline constexpr std::string_view kQ = "q";                 // [n, n_head * head_dim] after RoPE
inline constexpr std::string_view kK = "k";                 // [n, n_head_kv * head_dim] after RoPE
inline constexpr std::string_view kV = "v";                 // [n, n_head_kv * head_dim]
inline constexpr std::string_view kKqvOut = "kqv_out";      // [n, n_head * head_dim] wo input
inline constexpr std::string_view kAttnOut = "attn_out";    // [n, n_embd] wo output
inline constexpr std::string_view kFfnInp = "ffn_inp";      // [n, n_embd] residual after attention
inline constexpr std::string_view kFfnNorm = "ffn_norm";    // [n, n_embd] gate/up input
inline constexpr std::string_view kFfnGate = "ffn_gate";    // [n, n_ff] gate projection
inline constexpr std::string_view kFfnAct = "ffn_act";      // [n, n_ff] down input
inline constexpr std::string_view kFfnOut = "ffn_out";      // [n, n_embd] down output
inline constexpr std::string_view kLOut = "l_out";          // [n, n_embd] the layer's output

}  // namespace squeeze::model::names
