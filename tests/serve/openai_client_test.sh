#!/usr/bin/env bash
# ctest's entry to openai_client_test.py: SQUEEZE_BINARY MODELS_DIR. Needs the default model and
# the venv of scripts/serve_venv.sh (created here when missing); without either the test fails
# under CI=true and is skipped (exit 77, with the reason) elsewhere.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
binary="$1"
model="${SQUEEZE_TEST_MODELS_DIR:-$2}/SmolLM2-135M-Instruct.Q4_1.gguf"
missing() {
  echo "openai_client_test: $1" >&2
  [[ "${CI:-}" == true ]] && exit 1
  exit 77
}
[[ -f "$model" ]] || missing "no model at $model (scripts/fetch_model.sh)"
python="$("$here/../../scripts/serve_venv.sh")" || missing "cannot set up the openai client's venv"
exec "$python" "$here/openai_client_test.py" "$binary" "$model"
