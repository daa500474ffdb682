#!/usr/bin/env bash
# Installs what inferkit needs on a Debian 12 machine, and nothing when all is present.
# Usage: scripts/setup.sh            (needs root or sudo only when something is missing)
set -euo pipefail

packages=(g++ cmake ninja-build libeigen3-dev libxsimd-dev xtl-dev catch2 libbenchmark-dev
          gnuplot-nox doxygen python3
          # test-only tools: the JSON Schema judge of the grammar tests, numpy for reference scripts
          python3-jsonschema python3-numpy
          # distributed/ (optional): Open MPI
          libopenmpi-dev openmpi-bin
          # fuzz preset: clang-15 with libFuzzer (the fuzz targets build with OpenMP off)
          clang-15 libfuzzer-15-dev
          # tsan preset: clang-14 with its libomp, whose Archer tool (libarcher.so) tells
          # ThreadSanitizer about OpenMP's synchronization (libomp-15-dev conflicts with it)
          clang-14 libomp-14-dev)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all dependencies present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: apt-get not found; install these packages by hand: ${missing[*]}" >&2
  exit 1
fi
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo_cmd[@]}" apt-get update -qq; then
  echo "setup: 'apt-get update' failed; cannot install ${missing[*]}" >&2
  exit 1
fi
if ! "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  echo "setup: 'apt-get install ${missing[*]}' failed" >&2
  exit 1
fi
echo "setup: done"
