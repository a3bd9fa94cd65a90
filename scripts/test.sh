#!/usr/bin/env bash
# The tests on a fresh machine: install dependencies, fetch the models and llama.cpp's
# tokenizer tests, build, and run
# every test on the best kernels this CPU has, then forced to AVX2 (where the best is AVX-512 or
# AMX) and to the scalar path. The kernel tests also run every tier's kernels this CPU has by
# name (Isa::Avx512 and Isa::Amx cases), whatever SQUEEZE_ISA says.
# SQUEEZE_TEST_TIERS=best runs the first pass only (.ci/run's sanitizer pass, to stay in CI's time);
# SQUEEZE_TEST_EXCLUDE (a ctest -E regex) leaves tests out of that pass.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SQUEEZE_BUILD_DIR:-$root/build}"
"$root/scripts/install_deps.sh"
"$root/scripts/fetch_model.sh"
"$root/scripts/fetch_model.sh" gemma3  # the second architecture's reference tests
"$root/scripts/fetch_vocab_tests.sh"   # llama.cpp's tokenizer tests
"$root/scripts/build.sh" "$build" "$@"
"$root/scripts/serve_venv.sh" >/dev/null  # the openai client of the serving tests
# The kernel ISA squeeze picks here (core/cpu.h: amx > avx512 > avx2 > scalar).
best=scalar
grep -q avx2 /proc/cpuinfo && best=avx2
grep -q avx512_vnni /proc/cpuinfo && grep -q avx512vl /proc/cpuinfo && grep -q avx512bw /proc/cpuinfo && best=avx512
[[ "$best" == avx512 ]] && grep -q amx_tile /proc/cpuinfo && grep -q amx_int8 /proc/cpuinfo && best=amx
echo "== tests, default kernels ($best)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -E "${SQUEEZE_TEST_EXCLUDE:-^\$}"
if [[ "${SQUEEZE_TEST_TIERS:-all}" == best ]]; then
  echo "SQUEEZE_TEST_TIERS=best: the forced avx2 and scalar passes are not run"
  exit 0
fi
# The HTTP server over the openai client runs in the first pass (and under the sanitizers) only:
# it adds no kernel of its own (under the scalar kernels it alone took 108 s). The serving
# engine's tests on SmolLM2 (scheduling, batching, forks) skip the scalar pass too (64 s there):
# Batch.SequencesTogetherEqualEachAloneSmolLM2 still checks the scalar kernels' batch invariance.
# Gemma 3's reference run skips it too (84 s there; its tolerance is set by the AVX2 and AVX-512
# kernels, whose K-quant and Q5_0 sums the scalar ones do not reproduce to the bit). The passkey
# run on SmolLM2 (four prompts of 500 tokens) skips it too: 247 s there, the pass's whole wall; the
# scalar kernels it runs are the forward reference tests'.
http_tests='^Serve\.OpenAiClient$'
scalar_skip='^Serve\.OpenAiClient$|^Engine\.|^Gemma3Reference\.Logits|^Passkey\.PromptsFillTheBudget'
if [[ "$best" == avx512 || "$best" == amx ]]; then
  echo "== tests, SQUEEZE_ISA=avx2"
  SQUEEZE_ISA=avx2 ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -E "$http_tests"
fi
echo "== tests, SQUEEZE_ISA=scalar"
SQUEEZE_ISA=scalar ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -E "$scalar_skip"
