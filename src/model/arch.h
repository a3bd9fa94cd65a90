// The table of architectures. An architecture is a name (general.architecture), a loader that
// reads its hyperparameters and binds its tensors, the manifest of a layer's weight matrices,
// and the forward pass of one layer, made of the shared blocks of model/blocks.h. Model::load,
// the forward pass (model/forward.h), calibration and quantization reach an architecture only
// through this table, so a new one is one file and one line here (docs/ARCHITECTURE.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/forward.h"
#include "model/model.h"

namespace squeeze::model {

// The widths a layer's matrices are made of.
enum class Width { Embd, Q, Kv, Ff };  // n_embd, n_head * head_dim, n_head_kv * head_dim, n_ff
int64_t width(const HParams& hp, Width w);

// One weight matrix of a layer: its GGUF name after "blk.N.", where Model binds it, its shape,
// and the intermediate (model/names.h) it multiplies, whose statistics calibration collects
// for it.
struct LayerMatrix {
  std::string_view suffix;
  ops::WeightView LayerWeights::*view;
  Width n_in, n_out;
  std::string_view input;
};

struct Arch {
  std::string_view name;
  // Reads the hyperparameters from f into hp and binds every tensor of the architecture into m
  // (hp.arch is set before the call). Throws FormatError.
  void (*load)(const gguf::File& f, HParams& hp, Model& m);
  // The weight matrices of every layer, in the order the forward pass reads them.
  std::span<const LayerMatrix> layer_matrices;
  // Layer il on the residual stream s.x (model/forward.h's forward_layer).
  void (*forward_layer)(const Model& m, int64_t il, kv::KvCache& kv, ForwardScratch& s,
                        ThreadPool& pool, const ChunkLayout& b, const TensorCallback* callback);
};

// The architecture named `name`, or nullptr.
const Arch* find_arch(std::string_view name);
// The names of the supported architectures, comma-separated (for error messages).
std::string supported_archs();

// The layer index of a "blk.N.<rest>" tensor name, with the position of the dot before <rest>
// in `dot`; -1 (dot unchanged) for any other name.
int64_t layer_of_name(std::string_view name, size_t& dot);

// The layer matrix of `arch` whose GGUF name is `name` ("blk.12.ffn_up.weight"), with its layer
// index; nullptr (layer -1) for any other name.
const LayerMatrix* find_layer_matrix(const Arch& arch, std::string_view name, int64_t& layer);

}  // namespace squeeze::model
