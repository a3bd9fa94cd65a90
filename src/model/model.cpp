#include "model/model.h"

#include "core/error.h"
#include "model/llama.h"

namespace squeeze::model {

std::unique_ptr<Model> Model::load(const std::string& path) {
  return load(gguf::File::open(path));
}

std::unique_ptr<Model> Model::load(gguf::File file) {
  std::unique_ptr<Model> m(new Model(std::move(file)));
  m->hparams_.arch = std::string(m->file_.require_string("general.architecture"));
  if (m->hparams_.arch == "llama") {
    load_llama(*m);
  } else {
    throw FormatError(m->file_.path() + ": unsupported architecture '" + m->hparams_.arch +
                      "' (supported: llama)");
  }
  return m;
}

size_t Model::weight_bytes() const {
  auto bytes = [](const ops::WeightView& w) { return w.row_bytes * static_cast<size_t>(w.n_rows); };
  size_t total = bytes(output);
  for (const LayerWeights& L : layers) {
    total += bytes(L.wq) + bytes(L.wk) + bytes(L.wv) + bytes(L.wo) + bytes(L.ffn_gate) +
             bytes(L.ffn_up) + bytes(L.ffn_down);
  }
  return total;
}

}  // namespace squeeze::model
