// libFuzzer harness: the saved-logits reader (targets.h, logits_input), through a temporary
// file of this process's own, in /dev/shm where there is one (rewriting a file on ext4 flushes
// it on close: 30x slower).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const struct Temp {
    std::string path = (std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp") +
                       std::string("/squeeze_fuzz_logits.") + std::to_string(getpid());
    ~Temp() { std::remove(path.c_str()); }
  } temp;
  squeeze::fuzz::logits_input({data, size}, temp.path);
  return 0;
}
