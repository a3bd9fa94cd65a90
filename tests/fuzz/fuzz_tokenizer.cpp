// libFuzzer harness: encode and decode with SmolLM2's vocabulary, loaded once
// (targets.h, tokenizer_input).
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const squeeze::tokenizer::Tokenizer tok = [] {
    try {
      return squeeze::fuzz::load_tokenizer(squeeze::fuzz::default_model_path());
    } catch (const squeeze::Error& e) {
      std::fprintf(stderr, "fuzz_tokenizer: %s (scripts/fetch_model.sh fetches it)\n", e.what());
      std::exit(2);
    }
  }();
  squeeze::fuzz::tokenizer_input(tok, {data, size});
  return 0;
}
