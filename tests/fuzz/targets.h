// The entry points of the fuzz harnesses (tests/fuzz/fuzz_*.cpp, clang + libFuzzer) and of the
// regression test that replays tests/data/fuzz/<harness>/ in the normal test suite (g++).
//
// Each takes one input of arbitrary bytes and returns normally when the code under test
// accepted it or rejected it with squeeze::Error (the project's error for bad input). Anything
// else — a crash, a sanitizer report, another exception, an invariant check below — is a bug.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace squeeze::fuzz {

using Bytes = std::span<const uint8_t>;

// A GGUF file: header, metadata, tensor table, typed getters on every key, the vocab, the
// sparsity table and, when the header parses, binding a model (Model::load).
void gguf_input(Bytes data);

// data[0] holds flags (add_special, parse_special, render_special); the rest is text to encode
// and, read as little-endian int32s, ids to decode (any value, also out of range).
void tokenizer_input(const tokenizer::Tokenizer& tok, Bytes data);

// NUL-separated fields: the template text, a flags byte (add_generation_prompt), then role and
// content of each message in turn.
void chat_template_input(Bytes data);

// A saved-logits file written to `temp_path` and read back in full. When data[0] is odd the
// header and chunk checksums are recomputed first (so the fuzzer reaches what lies behind
// them); the rest is the file.
void logits_input(Bytes data, const std::string& temp_path);

// A GGUF file whose squeeze.sparsity.* table is read and, when valid, bound (thresholds only)
// to `model` at its default level and at each of its levels.
void sparsity_input(const model::Model& model, Bytes data);

// A request body of the OpenAI API, parsed as /v1/completions and as /v1/chat/completions; an
// accepted one maps to valid sampler settings and has its responses built, a refused one is an
// ApiError 400 whose error body is JSON.
void openai_request_input(Bytes data);

// The default model for the harnesses: SQUEEZE_FUZZ_MODEL, else models/ in the source tree.
std::string default_model_path();
// The tokenizer of a model file; throws squeeze::Error when the file is missing.
tokenizer::Tokenizer load_tokenizer(const std::string& model_path);
// The tiny random model of tests/util (2 layers), built in memory.
std::unique_ptr<model::Model> tiny_model();

}  // namespace squeeze::fuzz
