#!/usr/bin/env bash
# Chunked-prefill sweep of `inferkit-llama2c serve`: one synthetic trace (Poisson arrivals,
# shared system prompts) served at several prefill chunk sizes under the same token budget, plus
# the unchunked baseline ("none"). Writes DIR/serve_sweep.md (table), DIR/serve_sweep.dat and,
# with gnuplot, DIR/serve_sweep.png (time-between-tokens p99 and throughput against the chunk).
#
#   scripts/serve_sweep.sh DIR [MODEL]
# MODEL defaults to $INFERKIT_MODEL, else a stories15M-shaped random model made in DIR.
# Knobs (environment): SERVE_SWEEP_REQUESTS (64), SERVE_SWEEP_RATE (requests/s, 16),
# SERVE_SWEEP_CHUNKS ("16 32 64 128 256 none"), SERVE_SWEEP_BUDGET (1024), SERVE_SWEEP_SEQS (64),
# SERVE_SWEEP_THREADS (2). Needs build/release/examples/inferkit-llama2c.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:?usage: scripts/serve_sweep.sh DIR [MODEL]}"
mkdir -p "$dir"
runner=build/release/examples/inferkit-llama2c
[ -x "$runner" ] || { echo "serve_sweep: build $runner first (cmake --build --preset release --target inferkit-llama2c)" >&2; exit 1; }
model="${2:-${INFERKIT_MODEL:-}}"
if [ -z "$model" ]; then
  model="$dir/random-stories15M.bin"
  [ -f "$model" ] || "$runner" make-random --out "$model" --dim 288 --hidden 768 --layers 6 --heads 6 --vocab 32000 --seq-len 1024 >/dev/null
fi
requests="${SERVE_SWEEP_REQUESTS:-64}"
rate="${SERVE_SWEEP_RATE:-16}"
chunks="${SERVE_SWEEP_CHUNKS:-16 32 64 128 256 none}"
budget="${SERVE_SWEEP_BUDGET:-1024}"
seqs="${SERVE_SWEEP_SEQS:-64}"
threads="${SERVE_SWEEP_THREADS:-2}"

field() { awk -v k="$1" '{for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1)}'; }
{
  echo "Synthetic trace: $requests requests at $rate/s (prompts 32..512 tokens, 16 shared system prompts,"
  echo "outputs 16..256 tokens), budget $budget tokens, $seqs sequences, threads: $threads, model \`$model\`."
  echo
  echo "| prefill chunk | output tokens/s | TBT p50 (ms) | TBT p99 (ms) | TTFT p50 (ms) | TTFT p99 (ms) | prefill saved | preemptions |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$dir/serve_sweep.md"
: > "$dir/serve_sweep.dat"
for c in $chunks; do
  line=$("$runner" serve --model "$model" --synthetic "$requests" --rate "$rate" --max-batched-tokens "$budget" \
         --max-seqs "$seqs" --chunk "$c" --threads "$threads" --out /dev/null 2>&1 | grep '^serve:')
  echo "chunk $c: $line"
  tps=$(echo "$line" | field throughput); p50=$(echo "$line" | field tbt_p50_ms); p99=$(echo "$line" | field tbt_p99_ms)
  t50=$(echo "$line" | field ttft_p50_ms); t99=$(echo "$line" | field ttft_p99_ms)
  saved=$(echo "$line" | field prefill_saved); pre=$(echo "$line" | field preemptions)
  label="$c"; [ "$c" = none ] && label="unchunked"; [ "$c" = 0 ] && label="budget"
  echo "| $label | $tps | $p50 | $p99 | $t50 | $t99 | $saved | $pre |" >> "$dir/serve_sweep.md"
  echo "\"$label\" $p99 $tps" >> "$dir/serve_sweep.dat"
done
if command -v gnuplot >/dev/null 2>&1; then
  gnuplot <<GNUPLOT
set terminal pngcairo size 900,560
set output "$dir/serve_sweep.png"
set title "serve: chunked prefill under a $budget-token budget ($requests requests at $rate/s)"
set xlabel "prefill chunk (tokens per request per iteration)"
set ylabel "time between tokens, p99 (ms)"
set y2label "output tokens/s"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set grid
set key top left
plot "$dir/serve_sweep.dat" using 0:2:xtic(1) with linespoints pt 7 title "TBT p99", \
     "$dir/serve_sweep.dat" using 0:3 axes x1y2 with linespoints pt 5 dt 2 title "throughput"
GNUPLOT
fi
echo "=== wrote $dir/serve_sweep.md"; [ -f "$dir/serve_sweep.png" ] && echo "=== wrote $dir/serve_sweep.png"; exit 0
