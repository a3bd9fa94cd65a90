// squeeze perplexity (placeholder until its issue lands: the command reports that it is missing).
#include <iostream>

#include "cli/commands.h"

namespace squeeze::cli {

int cmd_perplexity(int, char**) {
  std::cerr << "error: squeeze perplexity is not built yet\n";
  return 1;
}

}  // namespace squeeze::cli
