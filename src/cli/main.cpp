// The squeeze binary: dispatches to one subcommand per file (cli/commands.h).
#include <cstring>
#include <iostream>
#include <string_view>

#include "cli/commands.h"
#include "core/cpu.h"

namespace {

struct Command {
  std::string_view name;
  int (*fn)(int, char**);
  std::string_view help;
};

constexpr Command kCommands[] = {
    {"run", squeeze::cli::cmd_run, "generate text from a prompt"},
    {"chat", squeeze::cli::cmd_chat, "interactive chat with the model's chat template"},
    {"serve", squeeze::cli::cmd_serve, "OpenAI-compatible HTTP server (continuous batching)"},
    {"inspect", squeeze::cli::cmd_inspect, "print a GGUF file's metadata and tensor table"},
    {"perplexity", squeeze::cli::cmd_perplexity, "perplexity, KL divergence, top-1 agreement"},
    {"hellaswag", squeeze::cli::cmd_hellaswag, "HellaSwag accuracy (llama-perplexity's scoring)"},
    {"passkey", squeeze::cli::cmd_passkey, "passkey retrieval over depths of a long context"},
    {"bench", squeeze::cli::cmd_bench, "prompt and generation speed, GB/s and GFLOP/s"},
    {"quantize", squeeze::cli::cmd_quantize, "quantize a model (RTN, GPTQ; llama.cpp or squeeze types)"},
    {"prune", squeeze::cli::cmd_prune, "prune weights (magnitude, Wanda, SparseGPT; N:M)"},
    {"sparsify", squeeze::cli::cmd_sparsify, "calibrate activation-sparsity thresholds (TEAL, CATS)"},
    {"prune-prefill", squeeze::cli::cmd_prune_prefill, "calibrate the layers POP skips in prefill"},
    {"route", squeeze::cli::cmd_route, "which domain mask --domain auto picks for windows of a text"},
    {"heads", squeeze::cli::cmd_heads, "score every attention head (table, PNG heat map, ranking)"},
    {"calibrate-kv", squeeze::cli::cmd_calibrate_kv, "fit a codebook for q4 / q2 KV codes (--kv-codebook)"},
};

void usage(std::ostream& os) {
  os << "squeeze - run and compress LLMs on CPUs\n\nusage: squeeze COMMAND [options]\n\n"
        "commands:\n";
  for (const Command& c : kCommands) os << "  " << c.name << std::string(c.name.size() < 15 ? 15 - c.name.size() : 1, ' ') << c.help << "\n";
  os << "\n`squeeze COMMAND --help` shows a command's options.\n"
        "SQUEEZE_ISA=scalar|avx2|avx512|amx forces the kernel path (default: the best this CPU\n"
        "has; avx512 needs AVX-512 F/BW/VL/VNNI, amx also AMX-TILE/INT8/BF16 and the kernel's\n"
        "permission to use the tiles).\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  const std::string_view cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    usage(std::cout);
    return 0;
  }
  try {
    (void)squeeze::active_isa();  // validate SQUEEZE_ISA once, up front
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  for (const Command& c : kCommands) {
    if (cmd == c.name) return c.fn(argc - 1, argv + 1);
  }
  std::cerr << "error: unknown command '" << cmd << "' (commands:";
  for (const Command& c : kCommands) std::cerr << " " << c.name;
  std::cerr << "; see squeeze --help)\n";
  return 2;
}
