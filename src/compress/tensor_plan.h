// Which tensors a plain round-to-nearest conversion touches, and into what type: llama-quantize's
// rules for a "pure" run of one target type (llama-quant.cpp), so a file squeeze converts has the
// same tensor types as one llama.cpp converts.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/format.h"
#include "gguf/gguf.h"

namespace squeeze::compress {

// The types `squeeze quantize` writes, with llama.cpp's file type (general.file_type,
// enum llama_ftype in llama.h) for a file whose weight matrices are all of that type.
struct TargetType {
  formats::DType type;
  uint32_t llama_ftype;
};
std::span<const TargetType> target_types();
// "q8_0", "F16", ... (case-insensitive) -> the target. Throws UsageError naming the choices.
const TargetType& parse_target_type(std::string_view name);
// The target entry for `type`; throws UsageError if squeeze cannot write it as a whole file.
const TargetType& target_type(formats::DType type);

// ggml_n_dims: the number of dimensions up to the last one larger than 1 (at least 1), so a
// [4096, 1] tensor counts as 1-D.
int ggml_n_dims(const gguf::TensorInfo& t);

// llama.cpp's tensor_allows_quantization with default parameters: a tensor of 2 or more
// dimensions whose name ends in "weight", except norms and a list of small or special tensors
// (expert gates, positional embeddings, ...). token_embd.weight and output.weight are included.
bool allows_quantization(const gguf::TensorInfo& t);

enum class TensorAction {
  Copy,     // bytes copied unchanged (not a weight matrix, or already of the output type)
  Convert,  // dequantized to float and re-encoded with the output type's reference quantizer
};

struct TensorPlan {
  const gguf::TensorInfo* src = nullptr;
  formats::DType type = formats::DType::F32;  // type in the output file
  TensorAction action = TensorAction::Copy;
  // The row length is not a multiple of the target's block size: written as F16 instead,
  // as llama.cpp does ("must use F16 due to unusual shape").
  bool fallback = false;
};

// One entry per source tensor, in file order. Throws FormatError when a tensor to convert has
// a type squeeze cannot decode.
std::vector<TensorPlan> plan_conversion(const gguf::File& src, formats::DType target);

// The type holding the most elements among the source tensors that allow quantization
// (e.g. "q4_1"): recorded as squeeze.quantization.source_type. "none" if there are none.
std::string dominant_weight_type(const gguf::File& src);

}  // namespace squeeze::compress
