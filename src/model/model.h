// An immutable, loaded model: hyperparameters and typed views of its mmapped weights.
// Shared by every sequence; per-sequence state lives in Context (context.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "ops/rope.h"
#include "ops/tensor.h"

namespace squeeze::model {

struct Arch;

struct HParams {
  std::string arch;          // general.architecture
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;   // context length the model was trained for
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t n_ff = 0;          // the MLP's width (MoE: each expert's)
  int64_t n_expert = 0;      // MoE: experts per layer (0: a dense MLP)
  int64_t n_expert_used = 0; // MoE: experts each token is routed to
  int64_t head_dim = 0;      // per-head size of q, k and v
  int64_t n_rot = 0;         // rotary dims per head
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  ops::RopeLayout rope_layout = ops::RopeLayout::Norm;
  // The gated MLP's activation: silu (SwiGLU: llama, qwen) or tanh GELU (GeGLU: gemma).
  enum class FfnAct { Silu, GeluTanh } ffn_act = FfnAct::Silu;
  float embd_scale = 1.0f;   // the embedding rows are multiplied by it (gemma: sqrt(n_embd))
  float attn_scale = 0.0f;   // q.k scale; 0: 1/sqrt(head_dim)
  // The query is multiplied by attn_scale before attention (gemma, as gemma_pytorch and
  // llama.cpp do) rather than the scores after it: the same in exact arithmetic, but the query
  // is rounded to half floats for q.k, so small query values round differently.
  bool scale_q_first = false;
  // Sliding-window (local) attention: layers with swa_layer[il] see the n_swa positions up to
  // their own, with the rope base rope_freq_base_swa; the others see every position.
  int64_t n_swa = 0;
  std::vector<uint8_t> swa_layer;  // [n_layer], empty: no local layers
  float rope_freq_base_swa = 10000.0f;
  bool is_swa(int64_t il) const {
    return n_swa > 0 && static_cast<size_t>(il) < swa_layer.size() && swa_layer[il] != 0;
  }
};

// One expert of a routed (MoE) MLP: a SwiGLU MLP of n_ff wide, a slice of the layer's stacked
// ffn_{gate,up,down}_exps tensors.
struct ExpertMlp {
  ops::WeightView gate;  // [n_embd] -> [n_ff]
  ops::WeightView up;    // [n_embd] -> [n_ff]
  ops::WeightView down;  // [n_ff] -> [n_embd]
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  ops::WeightView wq;                // [n_embd] -> [n_head * head_dim]
  ops::WeightView wk;                // [n_embd] -> [n_head_kv * head_dim]
  ops::WeightView wv;                // [n_embd] -> [n_head_kv * head_dim]
  ops::WeightView wo;                // [n_head * head_dim] -> [n_embd]
  const float* ffn_norm = nullptr;   // [n_embd]
  ops::WeightView ffn_gate;          // [n_embd] -> [n_ff]
  ops::WeightView ffn_up;            // [n_embd] -> [n_ff]
  ops::WeightView ffn_down;          // [n_ff] -> [n_embd]
  // Present in some architectures only (null otherwise).
  const float* bq = nullptr;              // [n_head * head_dim] bias of wq (qwen2)
  const float* bk = nullptr;              // [n_head_kv * head_dim] bias of wk
  const float* bv = nullptr;              // [n_head_kv * head_dim] bias of wv
  const float* bo = nullptr;              // [n_embd] bias of wo (llama family; structured pruning)
  const float* b_down = nullptr;          // [n_embd] bias of ffn_down (likewise)
  const float* rope_freqs = nullptr;  // [n_rot / 2] rotary frequency divisors (Llama 3.1+)
  // MoE layers (qwen3moe): the router and the experts, in place of ffn_gate/up/down.
  ops::WeightView ffn_gate_inp;       // [n_embd] -> [n_expert] router logits
  std::vector<ExpertMlp> experts;     // [n_expert]
  const float* attn_q_norm = nullptr;     // [head_dim] RMS norm of each query head (QK-norm)
  const float* attn_k_norm = nullptr;     // [head_dim] RMS norm of each key head
  const float* attn_post_norm = nullptr;  // [n_embd] RMS norm of the attention block's output
  const float* ffn_post_norm = nullptr;   // [n_embd] RMS norm of the MLP's output
};

class Model {
 public:
  // Maps and validates the file, reads the hyperparameters and checks every tensor of the
  // architecture's manifest (presence, shape, supported type). Throws FormatError.
  static std::unique_ptr<Model> load(const std::string& path);
  // The same on a file already open (e.g. gguf::File::from_bytes).
  static std::unique_ptr<Model> load(gguf::File file);

  const gguf::File& file() const { return file_; }
  const HParams& hparams() const { return hparams_; }
  // The architecture's table entry (model/arch.h).
  const Arch& arch() const { return *arch_; }

  ops::WeightView token_embd;         // [n_vocab, n_embd] (row per token)
  const float* output_norm = nullptr; // [n_embd]
  ops::WeightView output;             // [n_embd] -> [n_vocab]; token_embd when tied
  bool tied_output = false;
  std::vector<LayerWeights> layers;   // [n_layer]

  // Bytes of weights read per generated token (every matrix once; for bandwidth figures).
  size_t weight_bytes() const;

 private:
  explicit Model(gguf::File file) : file_(std::move(file)) {}
  gguf::File file_;
  HParams hparams_;
  const Arch* arch_ = nullptr;
};

}  // namespace squeeze::model
