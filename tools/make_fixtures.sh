#!/usr/bin/env bash
# Remakes tests/data/*.json from llama.cpp: installs llama-cpp-python (pinned) into
# tools/.venv (it compiles llama.cpp: about 15 minutes on 2 cores), fetches the default model,
# and runs make_fixtures.py.
#
# llama.cpp is built for AVX2 (+FMA, F16C), with AVX-512 off, whatever the build machine has:
# its float arithmetic (summation orders, exp) differs between its AVX2 and AVX-512 code paths,
# and squeeze reproduces the AVX2 one bit for bit. A -march=native build on an AVX-512 machine
# gives logits that differ by ~1% and greedy tokens that differ at near-ties.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${SQUEEZE_REF_VENV:-$root/tools/.venv}"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv "$venv"
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$venv/bin/pip" install "llama-cpp-python==0.3.36" numpy
fi
"$root/scripts/fetch_model.sh"
"$venv/bin/python" "$root/tools/make_fixtures.py" \
  --model "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" --out "$root/tests/data" "$@"
