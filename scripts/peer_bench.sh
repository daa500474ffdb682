#!/usr/bin/env bash
# llama.cpp's llama-bench and inferkit's runner (`inferkit-llama2c bench`) on the very same GGUF
# files, interleaved (peer, ours, peer, ours ... per file and thread count), 1 and 2 threads:
# pp512 and tg128 tokens/s, the ratio ours / peer, the peak resident memory of each process
# (GNU time's %M) and a load figure (the wall time of a run with no prompt and one generated
# token: load + one token, for both programs).
#
# Usage: scripts/peer_bench.sh LLAMA_BENCH [MODEL.gguf ...]
#   LLAMA_BENCH  path to llama.cpp's llama-bench (e.g. /work/peer/llama.cpp/build/bin/llama-bench)
#   MODEL.gguf   files to measure; none: a TinyLlama-1.1B-shaped random model in F16 (dim 2048,
#                hidden 5632, 22 layers, 32 heads, 4 KV heads, vocab 32000 with llama.cpp's
#                SentencePiece vocabulary) is made with `make-random` into build/peer/.
# Environment: INFERKIT_RUNNER (default build/release/examples/inferkit-llama2c), PP (512),
#   TG (128), REPS (3), THREADS ("1 2"), INFERKIT_TEST_VOCAB_DIR (for the made model's vocabulary).
set -euo pipefail
cd "$(dirname "$0")/.."
peer=${1:?usage: scripts/peer_bench.sh LLAMA_BENCH [MODEL.gguf ...]}
shift
runner=${INFERKIT_RUNNER:-build/release/examples/inferkit-llama2c}
pp=${PP:-512} tg=${TG:-128} reps=${REPS:-3} threads=${THREADS:-"1 2"}
[ -x "$peer" ] || { echo "peer_bench: '$peer' is not an executable llama-bench" >&2; exit 2; }
[ -x "$runner" ] || { echo "peer_bench: build the runner first (cmake --build --preset release --target inferkit-llama2c)" >&2; exit 2; }
command -v /usr/bin/time >/dev/null || { echo "peer_bench: needs GNU time (/usr/bin/time) for the RSS" >&2; exit 2; }
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  mkdir -p build/peer
  m=build/peer/tinyllama-shape-f16.gguf
  if [ ! -f "$m" ]; then
    vocab=${INFERKIT_TEST_VOCAB_DIR:-/work/shared/vocab}/ggml-vocab-llama-spm.gguf
    "$runner" make-random --dim 2048 --hidden 5632 --layers 22 --heads 32 --kv-heads 4 --vocab 32000 \
      --seq-len 2048 --seed 1 --type f16 --vocab-from "$vocab" --out "$m"
  fi
  models=("$m")
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run NAME CMD...: runs CMD, its stdout to $tmp/NAME.out, the peak RSS (KiB) to $tmp/NAME.rss
run() {
  local name=$1
  shift
  /usr/bin/time -f %M -o "$tmp/$name.rss" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { echo "peer_bench: failed: $*" >&2; cat "$tmp/$name.err" >&2; exit 1; }
}
wall() {  # wall seconds of CMD
  local s e
  s=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  e=$(date +%s.%N)
  echo "$e - $s" | bc -l
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| model | threads | test | llama.cpp t/s | inferkit t/s | ratio | llama.cpp RSS MiB | inferkit RSS MiB | load+1 s llama.cpp / inferkit |"
echo "|---|---|---|---|---|---|---|---|---|"
for m in "${models[@]}"; do
  for t in $threads; do
    for test in pp tg; do
      if [ $test = pp ]; then pa=(-p "$pp" -n 0) oa=(--pp "$pp" --tg 0) label=pp$pp; else pa=(-p 0 -n "$tg") oa=(--pp 0 --tg "$tg") label=tg$tg; fi
      run peer "$peer" -m "$m" "${pa[@]}" -t "$t" -r "$reps" -o csv
      run ours "$runner" bench --model "$m" "${oa[@]}" --threads "$t" --reps "$reps"
      # llama-bench's CSV: the header names the columns; avg_ts is tokens/s
      peer_ts=$(awk -F, 'NR==1{for(i=1;i<=NF;i++){gsub(/"/,"",$i); if($i=="avg_ts") c=i}} NR==2{gsub(/"/,"",$c); print $c}' "$tmp/peer.out")
      ours_ts=$(awk -F'|' -v l="$label" '$4 ~ l {split($5, a, " "); print a[1]}' "$tmp/ours.out")
      ratio=$(echo "scale=2; $ours_ts / $peer_ts" | bc -l)
      peer_load=$(wall "$peer" -m "$m" -p 0 -n 1 -t "$t" -r 1)
      ours_load=$(wall "$runner" bench --model "$m" --pp 0 --tg 1 --threads "$t" --reps 1)
      printf '| %s | %s | %s | %.2f | %.2f | %sx | %d | %d | %.2f / %.2f |\n' "$(basename "$m")" "$t" "$label" \
        "$peer_ts" "$ours_ts" "$ratio" $(($(cat "$tmp/peer.rss") / 1024)) $(($(cat "$tmp/ours.rss") / 1024)) \
        "$peer_load" "$ours_load"
    done
  done
done
