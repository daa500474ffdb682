#!/usr/bin/env bash
# Writes the seed corpus of fuzz_gguf_model (tests/fuzz/corpus/fuzz_gguf_model/): tiny models
# made by the runner itself (make-random in F32 / F16 / BF16, quantize to Q8_0), and truncations
# of one (the reader's errors at the tensor infos and the data section).
# Usage (from the repository root, after building inferkit-llama2c):
#   tests/fuzz/make_gguf_model_seeds.sh [build/release/examples/inferkit-llama2c]
set -euo pipefail
cd "$(dirname "$0")/../.."
runner=${1:-build/release/examples/inferkit-llama2c}
out=tests/fuzz/corpus/fuzz_gguf_model
mkdir -p "$out"
tiny="--dim 8 --hidden 8 --layers 1 --heads 2 --kv-heads 1 --vocab 4 --seq-len 16 --seed 1"
for t in f32 f16 bf16; do "$runner" make-random $tiny --type $t --out "$out/llama_$t.gguf" >/dev/null; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$runner" make-random --dim 32 --hidden 32 --layers 1 --heads 2 --kv-heads 1 --vocab 4 --seq-len 16 --seed 2 \
  --type f16 --out "$tmp/d32.gguf" >/dev/null
"$runner" quantize --model "$tmp/d32.gguf" --qtype q8_0 --out "$out/llama_q8_0.gguf" >/dev/null
size=$(stat -c %s "$out/llama_f16.gguf")
for cut in 40 $((size / 2)) $((size - 8)); do head -c "$cut" "$out/llama_f16.gguf" >"$out/llama_f16_cut$cut"; done
ls -l "$out"
