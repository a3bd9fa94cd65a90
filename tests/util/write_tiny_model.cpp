// Writes the tiny random-weight model of an architecture's reference test
// (testing::tiny_arch_spec), for tools/make_arch_fixture.py to run through llama.cpp.
//
//   write_tiny_model ARCH OUT.gguf
#include <cstdio>
#include <exception>

#include "tiny_model.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s ARCH OUT.gguf\n", argv[0]);
    return 2;
  }
  try {
    squeeze::testing::write_tiny_model(argv[2], squeeze::testing::tiny_arch_spec(argv[1]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
