// Subcommands of the `squeeze` binary, one file each. Each takes the arguments after `squeeze`:
// argv[0] is the subcommand's name, argv[1..] its arguments. Each returns the process exit
// status and reports errors as one `error: ...` line on stderr.
#pragma once

namespace squeeze::cli {

// squeeze run: generate text from a prompt.
int cmd_run(int argc, char** argv);
// squeeze chat: interactive chat with the model's chat template.
int cmd_chat(int argc, char** argv);
// squeeze inspect FILE: GGUF version, alignment, metadata and the tensor table.
int cmd_inspect(int argc, char** argv);
// squeeze perplexity: llama-perplexity's protocol; saves logits and compares (KL divergence).
int cmd_perplexity(int argc, char** argv);
// squeeze hellaswag: HellaSwag accuracy with llama-perplexity --hellaswag's scoring.
int cmd_hellaswag(int argc, char** argv);
// squeeze passkey: passkey retrieval accuracy over depths of a long context (cli/passkey.cpp)
int cmd_passkey(int argc, char** argv);
// squeeze bench: prompt-processing and generation speed, achieved bandwidth and FLOP/s.
int cmd_bench(int argc, char** argv);
// squeeze quantize: round-to-nearest conversion between llama.cpp's block types.
int cmd_quantize(int argc, char** argv);
// squeeze prune: weight pruning, magnitude / Wanda / SparseGPT (cli/prune.cpp)
int cmd_prune(int argc, char** argv);
// squeeze sparsify: activation-sparsity thresholds (cli/sparsify.cpp)
int cmd_sparsify(int argc, char** argv);
// squeeze prune-prefill: the layer order POP skips in prefill (cli/prune_prefill.cpp)
int cmd_prune_prefill(int argc, char** argv);
// squeeze route: which domain --domain auto picks for windows of a text (cli/route.cpp)
int cmd_route(int argc, char** argv);
// squeeze heads: per-layer, per-head scores for prefill head pruning (cli/heads.cpp)
int cmd_heads(int argc, char** argv);
// squeeze calibrate-kv: a codebook for the quantized KV cache (cli/calibrate_kv.cpp)
int cmd_calibrate_kv(int argc, char** argv);
// squeeze serve: the OpenAI-compatible HTTP server.
int cmd_serve(int argc, char** argv);

}  // namespace squeeze::cli
