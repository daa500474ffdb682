#!/usr/bin/env bash
# Installs what is missing, then builds and runs every test twice: compiled for baseline x86-64
# (no -march, SSE2 kernels) and with -march=native (AVX2 / AVX-512 kernels).
# Usage: scripts/test.sh [preset ...]     (default: portable release)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(portable release)
jobs=$(nproc)
if [ -n "${INFERKIT_TEST_MODEL:-}" ]; then
  echo "test: INFERKIT_TEST_MODEL=$INFERKIT_TEST_MODEL"
elif [ -f ../shared/models/stories260K.bin ]; then
  export INFERKIT_TEST_MODEL="$(cd ../shared/models && pwd)/stories260K.bin"
  echo "test: INFERKIT_TEST_MODEL=$INFERKIT_TEST_MODEL"
fi
for preset in "${presets[@]}"; do
  echo "=== test preset: $preset"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs"
done
