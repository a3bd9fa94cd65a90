#!/usr/bin/env bash
# The tests on a fresh machine: install dependencies, fetch the default model, build, and run
# every test twice, once on the best kernels this CPU has and once forced to the scalar path.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SQUEEZE_BUILD_DIR:-$root/build}"
"$root/scripts/install_deps.sh"
"$root/scripts/fetch_model.sh"
"$root/scripts/build.sh" "$build" "$@"
echo "== tests, default kernels ($(grep -q avx2 /proc/cpuinfo && echo avx2 || echo scalar))"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
echo "== tests, SQUEEZE_ISA=scalar"
SQUEEZE_ISA=scalar ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
