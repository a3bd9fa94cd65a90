#!/usr/bin/env bash
# POP layer skipping together with TEAL activation sparsity (docs/POP.md): quality with
# `perplexity --kl-divergence` at ctx 2048 (POP with --prefill-split) and speed with
# `bench -p 2048 -n 128`, the four settings in 3 interleaved rounds.
#   bench/pop_combo.sh TEAL_MODEL "SKIP_LAYERS" [ACT_LEVEL]
# TEAL_MODEL: `squeeze sparsify --method teal --sparsity 0.5 -o TEAL_MODEL`; SKIP_LAYERS: e.g.
# "20,25-29" (the kld order's first 6 on SmolLM2).
set -euo pipefail
cd "$(dirname "$0")/.."
S=./build/squeeze M=$1 SKIP=$2 LEVEL=${3:-0.5}
T=../shared/data/wikitext-2-raw/wiki.test.raw
C=(-t 2 -f "$T" --ctx 2048 --chunks 10)
BASE=$(mktemp --suffix=.logits)
trap 'rm -f "$BASE"' EXIT
$S perplexity -m "$M" "${C[@]}" --save-logits "$BASE" 2>/dev/null | grep "PPL ="
settings=("--act-sparsity $LEVEL" "--prefill-skip $SKIP --prefill-split"
          "--act-sparsity $LEVEL --prefill-skip $SKIP --prefill-split")
for opt in "${settings[@]}"; do
  echo "== $opt"
  # shellcheck disable=SC2086
  $S perplexity -m "$M" "${C[@]}" --kl-divergence "$BASE" $opt 2>/dev/null |
    grep -E "PPL\(model\)|Mean KLD|Same top-1|First-token"
done
for r in 1 2 3; do
  for opt in "" "--act-sparsity $LEVEL" "--prefill-skip $SKIP" "--act-sparsity $LEVEL --prefill-skip $SKIP"; do
    # shellcheck disable=SC2086
    echo "round $r [$opt] $($S bench -m "$M" -t 2 -p 2048 -n 128 -r 1 --json $opt 2>/dev/null |
      python3 -c 'import json,sys; print(" ".join("%s %.1f" % (x["test"], x["median_ts"]) for x in json.load(sys.stdin)["results"]))')"
  done
done
