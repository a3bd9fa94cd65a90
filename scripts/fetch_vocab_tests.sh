#!/usr/bin/env bash
# Caches llama.cpp's tokenizer tests (models/ggml-vocab-NAME.gguf with its .inp and .out, from
# the llama-cpp-python sdist on PyPI, pinned) in models/vocab/ (git-ignored), for the tokenizer
# tests (tests/tokenizer/llamacpp_vocab_test.cpp), and llama.cpp's real chat templates
# (models/templates/*.jinja) in models/templates/, for the Jinja engine's test
# (tests/tokenizer/jinja_fixture_test.cpp). Reuses the sdist tools/build_llamacpp.sh unpacked
# when it is there. Safe to run again.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="0.3.36"
out="$root/models/vocab"
names=(gpt-2 llama-bpe llama-spm phi-3 qwen2 gemma-4)

templates="$root/models/templates"

have_all() {
  for n in "${names[@]}"; do
    for ext in "" .inp .out; do [[ -f "$out/ggml-vocab-$n.gguf$ext" ]] || return 1; done
  done
  [[ -f "$templates/.complete" ]]
}
have_all && exit 0

mkdir -p "$out"
tree="$root/tools/.llamacpp/llama-cpp-python-$version/vendor/llama.cpp/models"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [[ ! -d "$tree" ]]; then
  echo "fetching the llama-cpp-python $version sdist from PyPI (llama.cpp's tokenizer tests) ..." >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$tmp" >&2
  members=()
  for n in "${names[@]}"; do
    for ext in "" .inp .out; do
      members+=("llama_cpp_python-$version/vendor/llama.cpp/models/ggml-vocab-$n.gguf$ext")
    done
  done
  tar -xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$tmp" "${members[@]}"
  tar -xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$tmp" --wildcards \
    "llama_cpp_python-$version/vendor/llama.cpp/models/templates/*.jinja"
  tree="$tmp/llama_cpp_python-$version/vendor/llama.cpp/models"
fi
for n in "${names[@]}"; do
  for ext in "" .inp .out; do
    cp "$tree/ggml-vocab-$n.gguf$ext" "$out/ggml-vocab-$n.gguf$ext.part"
    mv "$out/ggml-vocab-$n.gguf$ext.part" "$out/ggml-vocab-$n.gguf$ext"
  done
done
mkdir -p "$templates"
cp "$tree"/templates/*.jinja "$templates/"
touch "$templates/.complete"
echo "llama.cpp's vocab tests cached in $out, its chat templates in $templates" >&2
