#!/usr/bin/env bash
# The first command on a fresh machine: installs what is missing, builds only what the demo runs,
# and runs it, printing each step with the time elapsed; writes build/report/report.md.
#
#   scripts/demo.sh          the demo: the runner on the shared stories260K model (generation,
#                            speculative, beam and contrastive search, every cache policy's NLL),
#                            and the headline fast paths against their same-run baselines.
#                            About 6 minutes on a fresh 2-core machine, installs included.
#   scripts/demo.sh --full   the full report: builds everything (about 12 minutes on 2 cores) and
#                            runs every benchmark, the quantized-weight, steering and serving
#                            sections and the plots (about 50 minutes more on 2 cores).
#   INFERKIT_MODEL=PATH      a llama2.c checkpoint instead of the shared stories260K
#   INFERKIT_DEMO_BENCH_FILTER=RE  benchmark filter of the full run (default: every benchmark)
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
case "${1:-}" in
  --full) full=1 ;;
  "") ;;
  -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "demo: unknown argument '$1' (use --full or nothing)" >&2; exit 2 ;;
esac
[ "${INFERKIT_DEMO_QUICK:-}" = 0 ] && full=1  # the old spelling of --full
SECONDS=0
step() { printf '\n=== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$1"; }
quick=$((1 - full))
step "installing what is missing (scripts/setup.sh)"
scripts/setup.sh
cmake --preset release >/dev/null
if [ "$full" = 1 ]; then
  step "building everything (release preset, $(nproc) jobs; about 12 minutes on 2 cores)"
  cmake --build --preset release -j "$(nproc)"
else
  step "building the runner and two benchmark binaries (release preset, $(nproc) jobs)"
  cmake --build --preset release -j "$(nproc)" --target inferkit-llama2c inferkit-bench-kv inferkit-bench-sampling
fi
report=build/report
mkdir -p "$report"
runner=build/release/examples/inferkit-llama2c

# Which model: a trained checkpoint (INFERKIT_MODEL or the shared stories260K) or, failing both,
# a random one. Sections whose numbers need a trained model say so in the report.
shared_dir=../shared/models
model="${INFERKIT_MODEL:-}"
model_kind=given
if [ -z "$model" ] && [ -f "$shared_dir/stories260K.bin" ]; then model=$shared_dir/stories260K.bin; model_kind=shared; fi
if [ -z "$model" ]; then
  model_kind=random
  model=$report/random-stories15M.bin
  [ -f "$model" ] || "$runner" make-random --out "$model" --dim 288 --hidden 768 --layers 6 --heads 6 --vocab 32000 --seq-len 256
  echo "demo: no trained model (INFERKIT_MODEL unset, $shared_dir/stories260K.bin missing): running a RANDOM" \
       "model; the report marks the sections that need a trained one" >&2
fi
step "the llama2.c runner on $model"
echo "--- greedy (temperature 0), 64 tokens"
"$runner" generate --model "$model" --temperature 0 --steps 64 --print-ids | tee "$report/greedy64.txt"
echo "--- sampled: temperature 0.8, top-p 0.9, repeat penalty 1.1"
"$runner" generate --model "$model" --temperature 0.8 --top-p 0.9 --repeat-penalty 1.1 --steps 64 --seed 7 --print-ids
echo "--- self-speculative (first 2 layers draft, k = 4), greedy: same ids as plain greedy"
"$runner" generate --model "$model" --temperature 0 --steps 64 --draft-layers 2 --draft-k 4 --print-ids
echo "--- beam search (4 beams, HF length penalty 1.0)"
"$runner" generate --model "$model" --beams 4 --steps 32 --print-ids
echo "--- contrastive search (k 4, alpha 0.6)"
"$runner" generate --model "$model" --contrastive 4 --alpha 0.6 --steps 32 --print-ids

# Bytes for people: KiB below 1 MiB, MiB above (binary units, as the plots).
human_bytes() { awk -v b="$1" 'BEGIN { if (b >= 1048576) printf "%.2f MiB", b / 1048576; else printf "%.1f KiB", b / 1024 }'; }

step "streaming evaluation of every cache policy on 256 greedy tokens"
"$runner" generate --model "$model" --temperature 0 --steps 256 --print-ids 2>/dev/null > "$report/eval_ids.txt"
{
  echo "| cache policy | mean NLL | perplexity | KV held after 256 tokens |"
  echo "|---|---|---|---|"
} > "$report/eval.md"
: > "$report/eval.dat"
while IFS='|' read -r name flags; do
  line=$("$runner" eval --model "$model" --eval-ids "$report/eval_ids.txt" $flags)
  nll=$(echo "$line" | awk '{for (i = 1; i < NF; ++i) if ($i == "mean_nll") print $(i + 1)}')
  ppl=$(echo "$line" | awk '{for (i = 1; i < NF; ++i) if ($i == "ppl") print $(i + 1)}')
  bytes=$(echo "$line" | awk '{for (i = 1; i < NF; ++i) if ($i == "kv_bytes") print $(i + 1)}')
  echo "$name: $line"
  echo "| $name | $nll | $ppl | $(human_bytes "$bytes") |" >> "$report/eval.md"
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

if [ "$full" = 1 ]; then
step "quantized weights (quant/): NLL against the bytes the projections and classifier read per token"
"$runner" generate --model "$model" --temperature 0.8 --seed 11 --steps 256 --print-ids 2>/dev/null > "$report/calib_ids.txt"
{
  echo "| weights | activations | mean NLL | perplexity | weight bytes read per token |"
  echo "|---|---|---|---|---|"
} > "$report/quant.md"
: > "$report/quant.dat"
while IFS='|' read -r name acts flags; do
  line=$("$runner" eval --model "$model" --eval-ids "$report/eval_ids.txt" $flags)
  nll=$(echo "$line" | awk '{for (i = 1; i < NF; ++i) if ($i == "mean_nll") print $(i + 1)}')
  ppl=$(echo "$line" | awk '{for (i = 1; i < NF; ++i) if ($i == "ppl") print $(i + 1)}')
  bytes=$(echo "$line" | awk '{for (i = 1; i < NF; ++i) if ($i == "weight_bytes") print $(i + 1)}')
  echo "$name, $acts: $line"
  echo "| $name | $acts | $nll | $ppl | $(human_bytes "$bytes") |" >> "$report/quant.md"
  echo "\"$name, $acts\" $bytes $nll" >> "$report/quant.dat"
done <<QUANT
f32|float|--weights f32
int8|float|--weights int8
int8|int8 per token (W8A8)|--weights int8 --act-int8
int8|W8A8 + LLM.int8 (6.0)|--weights int8 --act-int8 --outlier-threshold 6
int8|W8A8 + SmoothQuant 0.5|--weights int8 --act-int8 --smooth 0.5 --calib-ids $report/calib_ids.txt
int4 g32|float|--weights int4
int4 g32|int8 per 32-block (Q8_0)|--weights int4 --act-int8
QUANT

step "steering: contrastive vector (coherent vs noisy samples) at layer 3, swept over scale"
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
fi

step "benchmarks: fast paths against their baselines in the same binary (JSON in build/bench/)"
# Only this run's JSON is summarized: results of earlier runs are removed first.
mkdir -p build/bench
rm -f build/bench/*.json
bench_load_before=$(uptime | sed 's/.*load average: //')
# The quick run's headline set (names end in /real_time or /manual_time, so no $ anchors).
quick_filter='attention_decode/(inferkit|memread)/Tk32768_Hq32_Hkv8_D128_(f32|bf16|int8|int4)/|sampling/(inferkit|naive)/V128256_(chain|topp095|greedy)/.*sigma:3'
if [ "$quick" = 1 ]; then
  bench_cmd="scripts/demo.sh: inferkit-bench-{kv,sampling} --benchmark_filter='$quick_filter' --benchmark_min_time=0.05"
  for b in kv sampling; do
    echo "=== inferkit-bench-$b"
    build/release/bench/inferkit-bench-$b --benchmark_filter="$quick_filter" --benchmark_min_time=0.05 \
      --benchmark_out="build/bench/$b.json" --benchmark_out_format=json
  done
else
  bench_cmd="scripts/bench.sh '${INFERKIT_DEMO_BENCH_FILTER:-.}' --benchmark_min_time=0.05"
  scripts/bench.sh "${INFERKIT_DEMO_BENCH_FILTER:-.}" --benchmark_min_time=0.05
fi
bench_load_after=$(uptime | sed 's/.*load average: //')
python3 scripts/bench_summary.py build/bench > "$report/bench_summary.md"
cat "$report/bench_summary.md"

step "sweeps for the report's plots"
sweep_decode='attention_decode_sweep'
sweep_sampler='sampling_sweep'
if [ "$quick" = 1 ]; then sweep_decode='attention_decode_sweep/.*/Tk:(1024|4096)/'; sweep_sampler='sampling_sweep/.*/V:(8192|32000|65536)/'; fi
build/release/bench/inferkit-bench-kv --benchmark_filter="$sweep_decode" --benchmark_format=csv \
  --benchmark_min_time=0.05 2>/dev/null > "$report/decode_sweep.csv"
build/release/bench/inferkit-bench-sampling --benchmark_filter="$sweep_sampler" --benchmark_format=csv \
  --benchmark_min_time=0.05 2>/dev/null > "$report/sampler_sweep.csv"
# name,iterations,real_time,...: series from the name (".../<series>/<x name>:<x>/..."), y = real_time.
split_series() {  # csv, series field, x field, output prefix
  awk -F, -v sf="$2" -v xf="$3" -v pre="$4" 'NR > 1 { gsub(/"/, "", $1); n = split($1, p, "/");
    split(p[xf], x, ":"); print x[2], $3 > (pre p[sf] ".dat") }' "$1"
}
split_series "$report/decode_sweep.csv" 3 4 "$report/decode_"
split_series "$report/sampler_sweep.csv" 2 4 "$report/sampler_"

# ---- the machine line: CPU, logical CPUs, and the instruction set the release build compiled for
build_isa() {
  local cache=build/release/CMakeCache.txt cxx flags macros isa ext="" m
  cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")
  flags=$(sed -n 's/^CMAKE_CXX_FLAGS:[A-Z]*=//p' "$cache")
  [ "$(sed -n 's/^INFERKIT_NATIVE:[A-Z]*=//p' "$cache")" = ON ] && flags="$flags -march=native"
  [ "$(sed -n 's/^INFERKIT_FORCE_SCALAR:[A-Z]*=//p' "$cache")" = ON ] && { echo "scalar (INFERKIT_FORCE_SCALAR; flags:${flags:- none})"; return; }
  # shellcheck disable=SC2086
  macros=$("$cxx" $flags -dM -E -x c++ /dev/null 2>/dev/null || true)
  has() { grep -q "#define __$1__ " <<<"$macros"; }
  if has AVX512F; then
    for m in BW DQ VL VNNI BF16 FP16; do has "AVX512$m" && ext="$ext $m"; done
    isa="AVX-512 (F$ext), 16 float lanes per vector"
  elif has AVX2; then
    isa="AVX2"; has FMA && isa="$isa + FMA"; has F16C && isa="$isa + F16C"; isa="$isa, 8 float lanes per vector"
  else
    isa="SSE2, 4 float lanes per vector"
  fi
  echo "$isa (compiler flags:${flags:- none})"
}
cpu_model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
machine="CPU ${cpu_model:-unknown}; $(nproc) logical CPUs available; build ISA: $(build_isa)"

# ---- plots
# Scatter of "name" bytes y rows (a .dat file) with a legend (one marker per row, no text on the
# plot, so nothing overlaps), bytes on the x axis in KiB or MiB, and rows that share a byte count
# drawn side by side (dodged by a few percent on the log axis; the table has the exact values).
scatter_plot() {  # dat png title xlabel ylabel
  local dat=$1 png=$2 title=$3 xlabel=$4 ylabel=$5
  local unit div plotdat=${dat%.dat}_plot.dat
  div=$(awk 'BEGIN { m = 0 } { v = $(NF - 1); if (v > m) m = v } END { print (m >= 4 * 1048576 ? 1048576 : 1024) }' "$dat")
  unit=$([ "$div" = 1048576 ] && echo MiB || echo KiB)
  # name (quoted, may hold spaces) | bytes | y  ->  x_dodged y, one row per line, same order.
  awk -v div="$div" '{ y = $NF; b = $(NF - 1); n[b]++; name[NR] = $0; bytes[NR] = b; yy[NR] = y }
    END { for (i = 1; i <= NR; ++i) { b = bytes[i]; k[b]++; off = (k[b] - 1 - (n[b] - 1) / 2) * 0.07;
            printf "%.6g %s\n", b / div * exp(off), yy[i] } }' "$dat" > "$plotdat"
  local xrange  # from a power of two below the smallest x to one above the largest, so ticks are 2^k
  xrange=$(awk 'NR == 1 { lo = $1; hi = $1 } { if ($1 < lo) lo = $1; if ($1 > hi) hi = $1 }
    END { printf "%g %g", 2 ^ int(log(lo * 0.95) / log(2) - (lo * 0.95 < 1)), 2 ^ (int(log(hi * 1.05) / log(2)) + 1) }' "$plotdat")
  local cmd="" i=0 name
  local -a pts=(7 5 9 11 13 15 1 2 3 4 6 8 10 12)
  local -a colors=("#1b9e77" "#d95f02" "#7570b3" "#e7298a" "#66a61e" "#a6761d" "#1f78b4" "#444444")
  while IFS= read -r line; do
    name=$(sed 's/^"\(.*\)" [^ ]* [^ ]*$/\1/' <<<"$line")
    cmd="$cmd${cmd:+, }\"$plotdat\" every ::$i::$i using 1:2 with points pt ${pts[$((i % 14))]} ps 2 lw 2 lc rgb \"${colors[$((i % 8))]}\" title \"$name\""
    i=$((i + 1))
  done < "$dat"
  gnuplot <<GNUPLOT
set terminal pngcairo size 1100,600 font ",11" noenhanced
set output "$png"
set title "$title"
set xlabel "$xlabel ($unit, log scale)"
set ylabel "$ylabel"
set logscale x 2
set xrange [${xrange% *}:${xrange#* }]
set xtics ${xrange% *}, 2
set format x "%g"
set offsets 0, 0, graph 0.08, graph 0.08
set grid
set key outside right top vertical Left reverse spacing 1.4 width -4
plot $cmd
GNUPLOT
}

plots=""
if command -v gnuplot >/dev/null 2>&1; then
  gnuplot <<GNUPLOT
set terminal pngcairo size 900,560 font ",11"
set output "$report/decode_vs_context.png"
set title "Decode attention (Hq 32, Hkv 8, d 128, 2 threads) against context length"
set xlabel "cached tokens"
set ylabel "ms per call (log scale)"
set logscale xy
set xtics ("1k" 1024, "4k" 4096, "16k" 16384, "32k" 32768)
set format y "%g"
set grid
set key left top
cols = "#1b9e77 #d95f02 #7570b3 #e7298a #444444"
encs = "f32 bf16 int8 int4 kivi4"
plot for [i = 1:5] "$report/decode_".word(encs, i).".dat" using 1:2 with linespoints lw 2 pt 7 lc rgb word(cols, i) title word(encs, i)
set output "$report/sampler_vs_vocab.png"
set title "Sampler chain (penalty, temperature, top-k, top-p, min-p, draw) against vocabulary size"
set xlabel "vocabulary size (tokens)"
set ylabel "µs per call (log scale)"
set xtics ("8k" 8192, "32k" 32000, "64k" 65536, "128k" 128256, "256k" 262144)
plot "$report/sampler_inferkit.dat" using 1:2 with linespoints lw 2 pt 7 lc rgb "#1b9e77" title "inferkit", \
     "$report/sampler_naive.dat" using 1:2 with linespoints lw 2 pt 5 lc rgb "#d95f02" title "naive (full sort)"
GNUPLOT
  scatter_plot "$report/eval.dat" "$report/nll_vs_bytes.png" "Streaming evaluation: mean NLL against KV bytes held" \
    "KV cache bytes held after 256 tokens" "mean NLL (nats)"
  plots="![NLL against KV bytes](nll_vs_bytes.png)"
  if [ "$full" = 1 ]; then
  scatter_plot "$report/quant.dat" "$report/nll_vs_weight_bytes.png" "Quantized weights: mean NLL against weight bytes read per token" \
    "weight bytes read per token, projections and classifier" "mean NLL (nats)"
  gnuplot <<GNUPLOT
set terminal pngcairo size 900,560 font ",11"
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
fi

# ==== SERVING SWEEP ===============================================================================
# scripts/serve_sweep.sh serves one synthetic trace (Poisson arrivals, shared system prompts) at
# several prefill chunk sizes under one token budget; its table and plot become the report's
# "## Serving" section (<report dir>/serving.md).
rm -f "$report/serving.md"
if [ "$full" = 1 ]; then
  step "serving: continuous batching with chunked prefill (scripts/serve_sweep.sh)"
  scripts/serve_sweep.sh "$report/serve" "$model"
{
  echo "## Serving: chunked-prefill sweep"
  echo
  echo "\`inferkit-llama2c serve\` on $(basename "$model") (continuous batching, paged KV, prefix cache);"
  echo "the same synthetic trace at each prefill chunk size, same token budget (scripts/serve_sweep.sh)."
  echo
  cat "$report/serve/serve_sweep.md"
  echo
  if [ -f "$report/serve/serve_sweep.png" ]; then
    echo "![TBT p99 and throughput against the chunk](serve/serve_sweep.png)"
    echo
  fi
} > "$report/serving.md"
fi
# ==== END SERVING SWEEP ==========================================================================

# ---- what the model is, in words the report repeats where it matters
case "$model_kind" in
  shared) model_line="the shared stories260K checkpoint (\`$model\`: real TinyStories weights, 512-token vocabulary; no tokenizer is available, so outputs are token ids)" ;;
  given) model_line="\`$model\` (INFERKIT_MODEL)" ;;
  random) model_line="**a random model** (\`$model\`, stories15M-shaped): INFERKIT_MODEL is unset and \`$shared_dir/stories260K.bin\` is missing" ;;
esac
needs_model() {  # a section's note on a random model
  [ "$model_kind" = random ] && echo "> This section needs a trained model (the shared stories260K, or a llama2.c checkpoint in INFERKIT_MODEL). This run used a random model: $1" && echo
  return 0
}
greedy_check=""
if [ "$model_kind" = shared ] && [ -f "$shared_dir/stories260K_greedy256.txt" ]; then
  want=$(head -64 "$shared_dir/stories260K_greedy256.txt" | tr '\n' ' ' | sed 's/ *$//')
  got=$(tr -s ' \n' ' ' < "$report/greedy64.txt" | sed 's/^ *//; s/ *$//')
  if [ "$got" = "$want" ]; then greedy_check="The 64 greedy ids equal llama2.c's run.c reference output (\`$shared_dir/stories260K_greedy256.txt\`) token for token."
  else greedy_check="**The 64 greedy ids differ from llama2.c's run.c reference output** (\`$shared_dir/stories260K_greedy256.txt\`)."; fi
fi

{
  echo "# inferkit demo report"
  echo
  echo "- Model: $model_line."
  echo "- Machine: $machine."
  echo "- Run: $(date -u '+%Y-%m-%d %H:%M UTC'); inferkit $(sed -n 's/^#define INFERKIT_VERSION_STRING "\(.*\)"/\1/p' include/inferkit/version.hpp)$([ "$quick" = 1 ] && echo '; the quick demo (\`scripts/demo.sh --full\` adds every benchmark, quantized weights, steering and serving)')."
  echo
  echo "## Benchmarks: fast path against its baseline, this run"
  echo
  echo "Each line pairs an inferkit fast path with the baseline measured beside it in the same"
  echo "binary and the same run (naive reference, padded batch, or \`memread\`: the time to read the"
  echo "KV bytes once, a floor rather than a competitor). Ratio = baseline time / fast time; the counter is the"
  echo "fast path's throughput (GFLOPS, GBps, ...). Load average (1, 5, 15 min) before / after:"
  echo "$bench_load_before / $bench_load_after on $(nproc) CPUs; absolute times are noisy on a loaded machine,"
  echo "ratios less so. Command: \`$bench_cmd\`; JSON: \`build/bench/*.json\`; every pair:"
  echo "\`scripts/bench_summary.py build/bench --all\`."
  echo
  cat "$report/bench_summary.md"
  echo
  echo "![decode time against context](decode_vs_context.png)"
  echo
  echo "![sampler time against vocabulary](sampler_vs_vocab.png)"
  echo
  echo "## Generation"
  echo
  needs_model "the ids below are what a random network emits and say nothing about language."
  echo "Greedy (temperature 0), 64 token ids from BOS:"
  echo
  echo '```'
  fold -s -w 96 "$report/greedy64.txt"
  echo '```'
  echo
  [ -n "$greedy_check" ] && echo "$greedy_check" && echo
  echo "## Cache policies on the model's own greedy text"
  echo
  needs_model "the NLL values only compare the cache policies with each other (how far each moves from the dense f32 cache); they say nothing about language modelling."
  cat "$report/eval.md"
  echo
  echo "$plots"
  echo
  if [ "$full" = 1 ]; then
  echo "## Quantized weights on the model's own greedy text"
  echo
  needs_model "the NLL values only compare the weight formats with each other."
  cat "$report/quant.md"
  echo
  [ -f "$report/nll_vs_weight_bytes.png" ] && echo "![NLL against weight bytes](nll_vs_weight_bytes.png)" && echo
  echo "## Steering: scale sweep"
  echo
  needs_model "a contrastive vector between samples of a random network steers nothing meaningful; the sweep shows the mechanics only."
  echo "Contrastive vector at layer 3 from 8 pairs (samples at temperature 0.5 minus samples at"
  echo "temperature 2), evaluated on the greedy text above; token set: $steer_set."
  echo
  cat "$steer/sweep.md"
  echo
  [ -f "$report/steering_sweep.png" ] && echo "![steering sweep](steering_sweep.png)" && echo
  # ==== SERVING SECTION: <report dir>/serving.md from the serving sweep above, included as is ====
  if [ -f "$report/serving.md" ]; then
    cat "$report/serving.md"
  else
    echo "## Serving"
    echo
    echo "Not run: the serving sweep wrote no table."
  fi
  else
    echo "## More"
    echo
    echo "\`scripts/demo.sh --full\` adds every benchmark, quantized weights, steering and serving to this report."
  fi
  # ==== END SERVING SECTION =======================================================================
} > "$report/report.md"
step "done: wrote $report/report.md"
