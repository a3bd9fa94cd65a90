// libFuzzer harness: the chat template recogniser and renderer (targets.h, chat_template_input).
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  squeeze::fuzz::chat_template_input({data, size});
  return 0;
}
