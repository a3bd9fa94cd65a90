#include "compress/tensor_plan.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace squeeze::compress {

namespace {

using formats::DType;

// llama.h: LLAMA_FTYPE_ALL_F32 = 0, MOSTLY_F16 = 1, MOSTLY_Q4_0 = 2, MOSTLY_Q4_1 = 3,
// MOSTLY_Q8_0 = 7, MOSTLY_Q5_0 = 8, MOSTLY_Q5_1 = 9, MOSTLY_BF16 = 32.
constexpr TargetType kTargets[] = {
    {DType::F32, 0},  {DType::F16, 1},  {DType::BF16, 32}, {DType::Q8_0, 7},
    {DType::Q4_0, 2}, {DType::Q4_1, 3}, {DType::Q5_0, 8},  {DType::Q5_1, 9},
};

std::string choices() {
  std::string s;
  for (const TargetType& t : kTargets) s += (s.empty() ? "" : ", ") + std::string(formats::format_info(t.type).name);
  return s;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// Name parts that llama.cpp never quantizes (tensor_allows_quantization, llama-quant.cpp):
// norms, expert gates and routing tables, small per-layer tensors of some architectures,
// convolution and RWKV mixing weights, relative position biases, multimodal embeddings.
// (Its GLM5-next-only list is left out: squeeze has no such architecture.)
constexpr std::string_view kNeverQuantizedParts[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
    "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
    "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
    "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
    "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
    ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
    ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
};
// Whole names it never quantizes (BERT's positional and token-type embeddings).
constexpr std::string_view kNeverQuantizedNames[] = {"position_embd.weight", "token_types.weight"};

}  // namespace

std::span<const TargetType> target_types() { return kTargets; }

const TargetType& parse_target_type(std::string_view name) {
  const formats::FormatInfo* info = formats::format_by_name(name);
  if (info != nullptr) {
    for (const TargetType& t : kTargets) {
      if (t.type == info->type) return t;
    }
  }
  throw UsageError("unknown type '" + std::string(name) + "' (types: " + choices() + ")");
}

const TargetType& target_type(DType type) {
  for (const TargetType& t : kTargets) {
    if (t.type == type) return t;
  }
  throw UsageError("squeeze quantize cannot write " + std::string(formats::format_info(type).name) +
                   " files (types: " + choices() + ")");
}

int ggml_n_dims(const gguf::TensorInfo& t) {
  for (int i = static_cast<int>(t.shape.size()) - 1; i >= 1; --i) {
    if (t.shape[i] > 1) return i + 1;
  }
  return 1;
}

bool allows_quantization(const gguf::TensorInfo& t) {
  if (ggml_n_dims(t) < 2) return false;
  const std::string_view name = t.name;
  if (!name.ends_with("weight")) return false;
  for (std::string_view part : kNeverQuantizedParts) {
    if (contains(name, part)) return false;
  }
  return std::find(std::begin(kNeverQuantizedNames), std::end(kNeverQuantizedNames), name) ==
         std::end(kNeverQuantizedNames);
}

std::vector<TensorPlan> plan_conversion(const gguf::File& src, DType target) {
  (void)target_type(target);  // validates
  const int64_t block = formats::format_info(target).block_size;
  std::vector<TensorPlan> plan;
  plan.reserve(src.tensors().size());
  for (const gguf::TensorInfo& t : src.tensors()) {
    TensorPlan p{&t, t.type, TensorAction::Copy, false};
    if (allows_quantization(t)) {
      p.type = target;
      if (t.shape[0] % block != 0) {
        p.type = DType::F16;
        p.fallback = true;
      }
      if (p.type != t.type) {
        p.action = TensorAction::Convert;
        if (!formats::format_info(t.type).supported ||
            formats::kernels(t.type, Isa::Scalar).dequantize_row == nullptr) {
          throw FormatError(src.path() + ": tensor '" + t.name + "' is " +
                            std::string(formats::format_info(t.type).name) +
                            ", which squeeze cannot decode");
        }
      }
    }
    plan.push_back(p);
  }
  return plan;
}

std::string dominant_weight_type(const gguf::File& src) {
  std::map<DType, int64_t> elements;
  for (const gguf::TensorInfo& t : src.tensors()) {
    if (allows_quantization(t)) elements[t.type] += t.n_elements;
  }
  if (elements.empty()) return "none";
  const auto best = std::max_element(elements.begin(), elements.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  return std::string(formats::format_info(best->first).name);
}

}  // namespace squeeze::compress
