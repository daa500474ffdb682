#!/usr/bin/env bash
# The main job: installs what is missing, builds Release (-march=native) and runs every example
# and report, ending with the benchmarks of each fast path against its naive baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
mkdir -p build/report
for ex in build/release/examples/inferkit-*; do
  [ -x "$ex" ] || continue
  echo "=== example: $(basename "$ex")"
  "$ex"
done
echo "=== benchmarks (fast path vs naive baseline in one binary; JSON in build/bench/)"
scripts/bench.sh "${INFERKIT_DEMO_BENCH_FILTER:-.}" --benchmark_min_time=0.05
