// libFuzzer harness: the OpenAI API's request parser and response builders (targets.h,
// openai_request_input).
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  squeeze::fuzz::openai_request_input({data, size});
  return 0;
}
