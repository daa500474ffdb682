#!/usr/bin/env bash
# Builds the Release (-march=native) benchmarks and runs them all, writing JSON results to
# build/bench/<binary>.json. Usage: scripts/bench.sh [benchmark_filter_regex] [extra args...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
filter="${1:-.}"
shift || true
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
mkdir -p build/bench
for b in build/release/bench/inferkit-bench-*; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  echo "=== $name"
  "$b" --benchmark_filter="$filter" --benchmark_out="build/bench/${name#inferkit-bench-}.json" \
       --benchmark_out_format=json "$@"
done
