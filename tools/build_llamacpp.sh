#!/usr/bin/env bash
# Builds llama.cpp's own tools (llama-bench, llama-perplexity; more targets as arguments) from
# the llama-cpp-python sdist (PyPI, pinned), for the fastest ISA that works on this CPU,
# chosen by explicit flags: GGML_NATIVE=ON also enables AMX, and that build crashes on
# quantized models on these machines. Output: tools/.llamacpp/build/bin (git-ignored).
#
#   tools/build_llamacpp.sh [TARGET ...]       default targets: llama-bench llama-perplexity
#   LLAMACPP_ISA=avx2 tools/build_llamacpp.sh  AVX2 + FMA + F16C only (the fixtures' build),
#                                              into tools/.llamacpp/build-avx2
# The targets llama-hellaswag-scores and llama-greedy are ours (tools/llama_hellaswag_scores.cpp,
# tools/llama_greedy.cpp), linked against the tree's libraries.
# Prints the bin folder on stdout. About 10 minutes on 2 cores; a finished build is reused.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/tools/.llamacpp"
version="0.3.36"
isa="${LLAMACPP_ISA:-best}"
targets=("$@")
((${#targets[@]})) || targets=(llama-bench llama-perplexity)

src="$dir/llama-cpp-python-$version/vendor/llama.cpp"
if [[ ! -f "$src/CMakeLists.txt" ]]; then
  mkdir -p "$dir"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching the llama-cpp-python $version sdist from PyPI ..." >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$tmp" >&2
  tar -xzf "$tmp"/llama_cpp_python-"$version".tar.gz -C "$tmp"
  rm -rf "$dir/llama-cpp-python-$version"
  mv "$tmp/llama_cpp_python-$version" "$dir/llama-cpp-python-$version"
fi

has() { grep -q -w "$1" /proc/cpuinfo; }
flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
       -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
build="$dir/build"
if [[ "$isa" == avx2 ]]; then
  build="$dir/build-avx2"
  flags+=(-DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF)
else
  onoff() { has "$1" && echo ON || echo OFF; }
  flags+=(-DGGML_AVX512="$(onoff avx512f)" -DGGML_AVX512_VNNI="$(onoff avx512_vnni)"
          -DGGML_AVX512_VBMI="$(onoff avx512vbmi)" -DGGML_AVX512_BF16="$(onoff avx512_bf16)"
          -DGGML_AVX_VNNI="$(onoff avx_vnni)")
fi
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DBUILD_SHARED_LIBS=OFF "${flags[@]}" >&2
ours=() theirs=()
for t in "${targets[@]}"; do
  case "$t" in
    llama-hellaswag-scores|llama-greedy) ours+=("$t") ;;
    *) theirs+=("$t") ;;
  esac
done
((${#ours[@]})) && theirs+=(llama-common llama)
ninja -C "$build" -j "$(nproc)" "${theirs[@]}" >&2
for t in "${ours[@]}"; do
  tool="$root/tools/${t//-/_}.cpp"
  if [[ ! "$build/bin/$t" -nt "$tool" ]]; then
    mkdir -p "$build/bin"
    g++ -O2 -std=c++17 -I"$src/include" -I"$src/common" -I"$src/ggml/include" -I"$src/vendor" \
      "$tool" -o "$build/bin/$t" \
      "$build"/common/libllama-common.a "$build"/common/libllama-common-base.a \
      "$build"/vendor/cpp-httplib/libcpp-httplib.a "$build"/src/libllama.a \
      "$build"/ggml/src/libggml.a "$build"/ggml/src/libggml-cpu.a "$build"/ggml/src/libggml-base.a \
      -fopenmp -lpthread -ldl -lssl -lcrypto >&2
  fi
done
echo "$build/bin"
