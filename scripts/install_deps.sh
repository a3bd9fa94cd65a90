#!/usr/bin/env bash
# Installs the Debian packages squeeze builds with (skips apt when all are present).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config python3 python3-pip python3-venv
      libpcre2-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libgtest-dev libgmock-dev
      libopenblas-dev liblapacke-dev libpng-dev
      clang libclang-rt-14-dev)  # clang: the fuzz harnesses (scripts/fuzz.sh)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >&2
fi
