#!/usr/bin/env bash
# The main job: installs what is missing, builds Release (-march=native), runs the llama2.c
# runner (on $INFERKIT_MODEL if set, else the shared stories260K model if present, else a
# generated stories15M-shaped model), evaluates every cache policy on its own greedy text, runs
# the benchmarks of every fast path against its baseline, and writes build/report/report.md
# with tables and PNG plots.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
report=build/report
mkdir -p "$report"
runner=build/release/examples/inferkit-llama2c

model="${INFERKIT_MODEL:-}"
if [ -z "$model" ] && [ -f ../shared/models/stories260K.bin ]; then model=../shared/models/stories260K.bin; fi
if [ -z "$model" ]; then
  model=$report/random-stories15M.bin
  [ -f "$model" ] || "$runner" make-random --out "$model" --dim 288 --hidden 768 --layers 6 --heads 6 --vocab 32000 --seq-len 256
fi
echo "=== llama2.c runner on $model"
echo "--- greedy (temperature 0), 64 tokens"
"$runner" generate --model "$model" --temperature 0 --steps 64 --print-ids
echo "--- sampled: temperature 0.8, top-p 0.9, repeat penalty 1.1"
"$runner" generate --model "$model" --temperature 0.8 --top-p 0.9 --repeat-penalty 1.1 --steps 64 --seed 7 --print-ids
echo "--- self-speculative (first 2 layers draft, k = 4), greedy: same ids as plain greedy"
"$runner" generate --model "$model" --temperature 0 --steps 64 --draft-layers 2 --draft-k 4 --print-ids
echo "--- beam search (4 beams, HF length penalty 1.0)"
"$runner" generate --model "$model" --beams 4 --steps 32 --print-ids
echo "--- contrastive search (k 4, alpha 0.6)"
"$runner" generate --model "$model" --contrastive 4 --alpha 0.6 --steps 32 --print-ids

echo "=== streaming evaluation of every cache policy on 256 greedy tokens"
"$runner" generate --model "$model" --temperature 0 --steps 256 --print-ids 2>/dev/null > "$report/eval_ids.txt"
{
  echo "| cache policy | mean NLL | perplexity | KV bytes held |"
  echo "|---|---|---|---|"
} > "$report/eval.md"
: > "$report/eval.dat"
while IFS='|' read -r name flags; do
  line=$("$runner" eval --model "$model" --eval-ids "$report/eval_ids.txt" $flags)
  nll=$(echo "$line" | awk '{for (i = 1; i < NF; ++i) if ($i == "mean_nll") print $(i + 1)}')
  ppl=$(echo "$line" | awk '{for (i = 1; i < NF; ++i) if ($i == "ppl") print $(i + 1)}')
  bytes=$(echo "$line" | awk '{for (i = 1; i < NF; ++i) if ($i == "kv_bytes") print $(i + 1)}')
  echo "$name: $line"
  echo "| $name | $nll | $ppl | $bytes |" >> "$report/eval.md"
  echo "\"$name\" $bytes $nll" >> "$report/eval.dat"
done <<'POLICIES'
dense f32|--cache dense
dense int8|--cache dense --kv-quant int8
dense int4|--cache dense --kv-quant int4
dense kivi4|--cache dense --kv-quant kivi4
dense kivi2|--cache dense --kv-quant kivi2
window 128|--cache window --window 128
sinks 4 + window 124|--cache sink-window --sinks 4 --window 124
sinks 4 + window 124, cache positions|--cache sink-window --sinks 4 --window 124 --positions cache
sinks 4 + window 124, int8|--cache sink-window --sinks 4 --window 124 --kv-quant int8
sinks 4 + window 124, int4|--cache sink-window --sinks 4 --window 124 --kv-quant int4
window 64|--cache window --window 64
sinks 4 + window 60|--cache sink-window --sinks 4 --window 60
POLICIES

echo "=== steering: contrastive vector (coherent vs noisy samples) at layer 3, swept over scale"
# Positive prompts: samples at temperature 0.5; negative: samples at temperature 2 (same seeds).
# The token set whose probability eval reports: the 4 most frequent ids of the positive samples.
steer=$report/steering
mkdir -p "$steer"
: > "$steer/pos.txt"
: > "$steer/neg.txt"
for seed in 1 2 3 4 5 6 7 8; do
  "$runner" generate --model "$model" --temperature 0.5 --steps 24 --seed "$seed" --print-ids 2>/dev/null >> "$steer/pos.txt"
  "$runner" generate --model "$model" --temperature 2.0 --steps 24 --seed "$seed" --print-ids 2>/dev/null >> "$steer/neg.txt"
done
steer_set=$(tr ' ' '\n' < "$steer/pos.txt" | grep . | sort | uniq -c | sort -k1,1nr -k2,2n | head -4 | awk '{printf "%s%s", sep, $2; sep = " "}')
steer_flags=(--steer-pos "$steer/pos.txt" --steer-neg "$steer/neg.txt" --steer-layer 3)
steer_field() { echo "$1" | awk -v k="$2" '{for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1)}'; }
{
  echo "| edit | scale | NLL shift (nats) | p(token set) |"
  echo "|---|---|---|---|"
} > "$steer/sweep.md"
for variant in add norm; do
  extra=()
  [ "$variant" = norm ] && extra=(--steer-preserve-norm)
  : > "$steer/sweep_$variant.dat"
  for scale in -0.5 -0.4 -0.3 -0.2 -0.1 0 0.1 0.2 0.3 0.4 0.5; do
    line=$("$runner" eval --model "$model" --eval-ids "$report/eval_ids.txt" "${steer_flags[@]}" "${extra[@]}" \
           --steer-scale "$scale" --steer-tokens "$steer_set" 2>/dev/null)
    echo "$scale $(steer_field "$line" nll_shift) $(steer_field "$line" p_set_steered)" >> "$steer/sweep_$variant.dat"
    echo "| $variant | $scale | $(steer_field "$line" nll_shift) | $(steer_field "$line" p_set_steered) |" >> "$steer/sweep.md"
  done
done
line=$("$runner" eval --model "$model" --eval-ids "$report/eval_ids.txt" "${steer_flags[@]}" --steer-ablate --steer-tokens "$steer_set")
echo "| ablation after every layer | 1 | $(steer_field "$line" nll_shift) | $(steer_field "$line" p_set_steered) |" >> "$steer/sweep.md"
echo "token set: $steer_set"
cat "$steer/sweep.md"
echo "--- greedy, steered by +0.5 and -0.5 from the first generated token on"
"$runner" generate --model "$model" --temperature 0 --steps 32 --print-ids "${steer_flags[@]}" --steer-scale 0.5 --steer-positions generated
"$runner" generate --model "$model" --temperature 0 --steps 32 --print-ids "${steer_flags[@]}" --steer-scale -0.5 --steer-positions generated

echo "=== benchmarks (fast path vs baseline in one binary; JSON in build/bench/)"
scripts/bench.sh "${INFERKIT_DEMO_BENCH_FILTER:-.}" --benchmark_min_time=0.05

echo "=== sweeps for the report's plots"
build/release/bench/inferkit-bench-kv --benchmark_filter='attention_decode_sweep' --benchmark_format=csv \
  --benchmark_min_time=0.05 2>/dev/null > "$report/decode_sweep.csv"
build/release/bench/inferkit-bench-sampling --benchmark_filter='sampling_sweep' --benchmark_format=csv \
  --benchmark_min_time=0.05 2>/dev/null > "$report/sampler_sweep.csv"
# name,iterations,real_time,...: series from the name (".../<series>/<x name>:<x>/..."), y = real_time.
split_series() {  # csv, series field, x field, output prefix
  awk -F, -v sf="$2" -v xf="$3" -v pre="$4" 'NR > 1 { gsub(/"/, "", $1); n = split($1, p, "/");
    split(p[xf], x, ":"); print x[2], $3 > (pre p[sf] ".dat") }' "$1"
}
split_series "$report/decode_sweep.csv" 3 4 "$report/decode_"
split_series "$report/sampler_sweep.csv" 2 4 "$report/sampler_"

plots=""
if command -v gnuplot >/dev/null 2>&1; then
  gnuplot <<GNUPLOT
set terminal pngcairo size 900,560
set output "$report/decode_vs_context.png"
set title "Decode attention (Hq 32, Hkv 8, d 128, 2 threads) against context length"
set xlabel "cached tokens"
set ylabel "ms per call"
set logscale xy
set grid
set key left top
plot for [e in "f32 bf16 int8 int4 kivi4"] "$report/decode_".e.".dat" using 1:2 with linespoints title e
set output "$report/sampler_vs_vocab.png"
set title "Sampler chain (penalty, temperature, top-k, top-p, min-p, draw) against vocabulary size"
set xlabel "vocabulary size"
set ylabel "µs per call"
plot "$report/sampler_inferkit.dat" using 1:2 with linespoints title "inferkit", \
     "$report/sampler_naive.dat" using 1:2 with linespoints title "naive (full sort)"
GNUPLOT
  gnuplot <<GNUPLOT
set terminal pngcairo size 900,560
set output "$report/nll_vs_bytes.png"
set title "Streaming evaluation: mean NLL against KV bytes held"
set xlabel "KV cache bytes held after 256 tokens"
set ylabel "mean NLL (nats)"
set grid
set key off
plot "$report/eval.dat" using 2:3:1 with labels point pt 7 offset char 1,1 notitle
GNUPLOT
  plots="![NLL against KV bytes](nll_vs_bytes.png)"
fi
{
  echo "# inferkit demo report"
  echo
  echo "Model: \`$model\`. Machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')."
  echo
  echo "## Cache policies on the model's own greedy text"
  echo
  cat "$report/eval.md"
  echo
  echo "$plots"
  echo
  echo "## Decode time against context length, per KV encoding"
  echo
  echo "![decode time against context](decode_vs_context.png)"
  echo
  echo "## Sampler time against vocabulary size"
  echo
  echo "![sampler time against vocabulary](sampler_vs_vocab.png)"
  echo
  echo "## Benchmarks"
  echo
  echo "Raw Google Benchmark JSON: \`build/bench/*.json\`; the curated tables with ratios are in"
  echo "\`docs/performance.md\`."
} > "$report/report.md"
if command -v gnuplot >/dev/null 2>&1; then
  gnuplot <<GNUPLOT
set terminal pngcairo size 900,560
set output "$report/steering_sweep.png"
set title "Steering at layer 3 (coherent minus noisy samples): held-out NLL and token-set probability"
set xlabel "scale (multiple of the mean-difference vector)"
set ylabel "NLL shift (nats)"
set y2label "p(token set)"
set ytics nomirror
set y2tics
set grid
set key top center
plot "$steer/sweep_add.dat" using 1:2 with linespoints title "NLL shift, addition", \
     "$steer/sweep_norm.dat" using 1:2 with linespoints title "NLL shift, norm preserved", \
     "$steer/sweep_add.dat" using 1:3 axes x1y2 with linespoints dt 2 title "p(set), addition", \
     "$steer/sweep_norm.dat" using 1:3 axes x1y2 with linespoints dt 2 title "p(set), norm preserved"
GNUPLOT
fi
{
  echo
  echo "## Steering: scale sweep"
  echo
  echo "Contrastive vector at layer 3 from 8 pairs (samples at temperature 0.5 minus samples at"
  echo "temperature 2), evaluated on the greedy text above; token set: $steer_set."
  echo
  cat "$steer/sweep.md"
  echo
  echo "![steering sweep](steering_sweep.png)"
} >> "$report/report.md"
echo "=== wrote $report/report.md"
