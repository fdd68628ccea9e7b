#!/usr/bin/env bash
# Installs the Debian packages mpitrain needs to build, test, train and benchmark, and
# libtorch-dev, so that the optional libtorch component (torch/, MPITRAIN_TORCH) is built and
# tested too (the core builds without it: -DMPITRAIN_TORCH=OFF); fortunes is the default text
# corpus of data.kind text (/usr/share/games/fortunes).
# Idempotent: when every package is present it changes nothing and runs no apt-get.
#   scripts/install-deps.sh           build, test and run dependencies
#   scripts/install-deps.sh --dev     the same (kept for old instructions): python3-torch,
#                                     which regenerates golden data and runs the libtorch
#                                     tests' Python references, is now always installed
set -euo pipefail

packages=(
  g++ make cmake pkg-config git
  libopenmpi-dev openmpi-bin
  libhdf5-dev libyaml-cpp-dev libopenblas-dev liblapack-dev zlib1g-dev libxxhash-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libtorch-dev python3-torch
  dataset-fashion-mnist fortunes
  python3 python3-numpy python3-h5py python3-matplotlib python3-pyte
  universal-ctags iproute2
  clang-14 libclang-rt-14-dev
)
if [[ $# -gt 0 && "${1:-}" != "--dev" ]]; then
  echo "usage: $0 [--dev]" >&2
  exit 2
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
