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
# The tests that read ../shared (a real model, its GGUF file, tokenizer vocabularies and their
# vectors, llama.cpp's grammars) find it through these variables and skip when they are unset.
shared="$(cd .. && pwd)/shared"
set_shared() {  # set_shared VAR path: export VAR=path unless VAR is set or path is missing
  if [ -z "${!1:-}" ] && [ -e "$2" ]; then export "$1=$2"; fi
  echo "test: $1=${!1:-(unset: those tests skip)}"
}
set_shared INFERKIT_TEST_MODEL "$shared/models/stories260K.bin"
set_shared INFERKIT_TEST_GGUF "$shared/models/stories260K.gguf"
set_shared INFERKIT_TEST_VOCAB_DIR "$shared/vocab"
set_shared INFERKIT_TEST_GRAMMAR_DIR "$shared/grammars"
for preset in "${presets[@]}"; do
  echo "=== test preset: $preset"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset" -j "$jobs"
done
