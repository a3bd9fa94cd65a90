#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, fetch the default model, build, and
# run `squeeze run` with the given arguments (default: a chat prompt).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install_deps.sh"
"$root/scripts/fetch_model.sh"
"$root/scripts/build.sh" "$root/build" >&2
if (($# == 0)); then
  set -- --chat -p "What is the capital of France? Answer in one sentence." -n 64 --temp 0
fi
exec "$root/build/squeeze" run "$@"
