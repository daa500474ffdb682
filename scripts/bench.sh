#!/usr/bin/env bash
# Builds the Release (-march=native) benchmarks and runs them, writing one JSON file per binary
# and machine.txt (scripts/machine.sh: CPU, build ISA, date, load) to the output directory, which
# scripts/perf_report.py turns into docs/performance.md.
# Usage: scripts/bench.sh [benchmark_filter_regex] [extra benchmark args...]
#   INFERKIT_BENCH_PRESET=release   preset whose benchmarks run (avx2-bench: the AVX2 column)
#   INFERKIT_BENCH_OUT=build/bench   output directory (emptied of earlier JSON first)
#   INFERKIT_BENCH_BINARIES="kv sampling"   only these binaries (default: every one)
#   INFERKIT_BENCH_TIMEOUT=300       stop a binary after this many seconds (the benchmarks finished
#                                    by then are kept; scripts/perf_report.py reads the partial JSON)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
filter="${1:-.}"
shift || true
preset=${INFERKIT_BENCH_PRESET:-release}
out=${INFERKIT_BENCH_OUT:-build/bench}
cmake --preset "$preset" >/dev/null
if [ -n "${INFERKIT_BENCH_BINARIES:-}" ]; then
  targets=()
  for b in $INFERKIT_BENCH_BINARIES; do targets+=("inferkit-bench-$b"); done
  cmake --build --preset "$preset" -j "$(nproc)" --target "${targets[@]}"
else
  cmake --build --preset "$preset" -j "$(nproc)"
fi
mkdir -p "$out"
rm -f "$out"/*.json
scripts/machine.sh "build/$preset" > "$out/machine.txt"
for b in build/$preset/bench/inferkit-bench-*; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  if [ -n "${INFERKIT_BENCH_BINARIES:-}" ] && ! grep -qw "${name#inferkit-bench-}" <<<"$INFERKIT_BENCH_BINARIES"; then continue; fi
  echo "=== $name ($(date -u +%H:%M:%S))"
  limit=()
  [ -n "${INFERKIT_BENCH_TIMEOUT:-}" ] && limit=(timeout "$INFERKIT_BENCH_TIMEOUT")
  "${limit[@]}" "$b" --benchmark_filter="$filter" --benchmark_out="$out/${name#inferkit-bench-}.json" \
       --benchmark_out_format=json "$@" || echo "bench: $name stopped (exit $?): its finished benchmarks are kept"
done
echo "bench: results in $out (scripts/perf_report.py --run <label>=$out)"
