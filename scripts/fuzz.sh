#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz: clang, ASan, UBSan) into build-fuzz/ and runs each
# for SECONDS (default 60), one after the other, with leak detection, an RSS limit of 2 GiB and
# a time limit of 1 s per input: any crash, sanitizer report, leak, out-of-memory or slow input
# fails the script (exit 1), with the input saved under build-fuzz/artifacts/<harness>/.
# Prints the executions of each harness. The corpora grow in build-fuzz/corpus/<harness>/ from
# the seeds (tests/fuzz/make_seeds.cpp, tests/fuzz/corpus/, tests/data/fuzz/).
#
# usage: scripts/fuzz.sh [SECONDS] [HARNESS...]   (harnesses: gguf tokenizer chat_template
#        logits sparsity openai; default all). SQUEEZE_FUZZ_BUILD_DIR, SQUEEZE_FUZZ_JOBS (build
#        jobs).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${1:-60}"
shift || true
harnesses=("$@")
((${#harnesses[@]})) || harnesses=(gguf tokenizer chat_template logits sparsity openai)
build="${SQUEEZE_FUZZ_BUILD_DIR:-$root/build-fuzz}"

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (scripts/install_deps.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
"$root/scripts/fetch_model.sh"  # the tokenizer harness and the seeds read the default model
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None \
  -DSQUEEZE_FUZZ=ON >/dev/null
ninja -C "$build" -j "${SQUEEZE_FUZZ_JOBS:-$(nproc)}" fuzz_make_seeds \
  "${harnesses[@]/#/fuzz_}"

rm -rf "$build/seeds"
"$build/tests/fuzz/fuzz_make_seeds" "$build/seeds"

# Per harness: the longest input, and the dictionary.
declare -A max_len=([gguf]=8192 [tokenizer]=1024 [chat_template]=4096 [logits]=4096 [sparsity]=4096
                   [openai]=4096)
declare -A dict=([gguf]=gguf.dict [sparsity]=gguf.dict [tokenizer]=text.dict [chat_template]=text.dict
                 [openai]=openai.dict)

export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=()
printf '%-14s %12s %9s  %s\n' harness executions exec/s result
for h in "${harnesses[@]}"; do
  corpus="$build/corpus/$h"
  artifacts="$build/artifacts/$h"
  log="$build/logs/$h.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  seeds=()
  for d in "$build/seeds/$h" "$root/tests/fuzz/corpus/$h" "$root/tests/data/fuzz/$h"; do
    [[ -d "$d" ]] && seeds+=("$d")
  done
  args=(-max_total_time="$secs" -timeout=1 -rss_limit_mb=2048 -detect_leaks=1
        -max_len="${max_len[$h]}" -print_final_stats=1 -artifact_prefix="$artifacts/")
  [[ -n "${dict[$h]:-}" ]] && args+=(-dict="$root/tests/fuzz/${dict[$h]}")
  rc=0
  "$build/tests/fuzz/fuzz_$h" "${args[@]}" "$corpus" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  runs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)"
  rate="$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)"
  result=ok
  if ((rc != 0)); then
    result="FAILED (exit $rc; log $log)"
    failed+=("$h")
  fi
  printf '%-14s %12s %9s  %s\n' "$h" "$runs" "$rate" "$result"
  if ((rc != 0)); then
    grep -E 'ERROR|SUMMARY|Test unit written|==[0-9]+==' "$log" | head -20 >&2 || true
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: failed: ${failed[*]} (inputs in $build/artifacts/)" >&2
  exit 1
fi
