// libFuzzer harness: the GGUF reader and model binding (targets.h, gguf_input).
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  squeeze::fuzz::gguf_input({data, size});
  return 0;
}
