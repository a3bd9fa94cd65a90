#!/usr/bin/env bash
# The server on a fresh machine: install dependencies, fetch the default model, build, and run
# `squeeze serve` (OpenAI-compatible HTTP on 127.0.0.1:8080 unless told otherwise) with the
# given arguments. Ctrl-C / SIGTERM: finishes the requests taken, then exits 0.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install_deps.sh"
"$root/scripts/fetch_model.sh"
"$root/scripts/build.sh" "$root/build" >&2
exec "$root/build/squeeze" serve "$@"
