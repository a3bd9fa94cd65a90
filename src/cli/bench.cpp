// squeeze bench (placeholder until its issue lands: the command reports that it is missing).
#include <iostream>

#include "cli/commands.h"

namespace squeeze::cli {

int cmd_bench(int, char**) {
  std::cerr << "error: squeeze bench is not built yet\n";
  return 1;
}

}  // namespace squeeze::cli
