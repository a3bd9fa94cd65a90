#include "model/model.h"

#include "core/error.h"
#include "model/arch.h"

namespace squeeze::model {

std::unique_ptr<Model> Model::load(const std::string& path) {
  return load(gguf::File::open(path));
}

std::unique_ptr<Model> Model::load(gguf::File file) {
  std::unique_ptr<Model> m(new Model(std::move(file)));
  m->hparams_.arch = std::string(m->file_.require_string("general.architecture"));
  m->arch_ = find_arch(m->hparams_.arch);
  if (m->arch_ == nullptr) {
    throw FormatError(m->file_.path() + ": unsupported architecture '" + m->hparams_.arch +
                      "' (supported: " + supported_archs() + ")");
  }
  m->arch_->load(m->file_, m->hparams_, *m);
  m->output.llama_order = true;
  return m;
}

size_t Model::weight_bytes() const {
  auto bytes = [](const ops::WeightView& w) { return w.row_bytes * static_cast<size_t>(w.n_rows); };
  size_t total = bytes(output);
  for (const LayerWeights& L : layers) {
    for (const LayerMatrix& lm : arch_->layer_matrices) total += bytes(L.*lm.view);
    total += bytes(L.ffn_gate_inp);
    for (const ExpertMlp& e : L.experts) total += bytes(e.gate) + bytes(e.up) + bytes(e.down);
  }
  return total;
}

}  // namespace squeeze::model
