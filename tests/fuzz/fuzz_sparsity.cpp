// libFuzzer harness: the activation-sparsity table reader, bound to the tiny test model
// (targets.h, sparsity_input).
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<squeeze::model::Model> model = squeeze::fuzz::tiny_model();
  squeeze::fuzz::sparsity_input(*model, {data, size});
  return 0;
}
