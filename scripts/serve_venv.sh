#!/usr/bin/env bash
# The Python environment of the serving tests and benchmarks (tests/serve/openai_client_test.py,
# bench/serve_load.py): a venv in .venv-serve (git-ignored) with the official `openai` client,
# pinned. Creates it when missing; prints the path of its python.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${SQUEEZE_SERVE_VENV:-$root/.venv-serve}"
want="openai==3.63.0"
if ! "$venv/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '${want#*==}')" 2>/dev/null; then
  echo "serve_venv: installing $want into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$want" >&2
fi
echo "$venv/bin/python"
