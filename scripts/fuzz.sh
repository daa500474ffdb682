#!/usr/bin/env bash
# Builds the fuzz preset (clang-15, libFuzzer, ASan + UBSan) and runs its targets over their seed
# corpora (tests/fuzz/corpus/<target>/, read only). New interesting inputs go to
# build/fuzz/corpus/<target>/, crashes to build/fuzz/artifacts/<target>/.
# Usage: scripts/fuzz.sh [target|all] [seconds per target]     (default: all, 20 s each)
#        FUZZ_NICE=19 scripts/fuzz.sh ...                       (run the fuzzers at low priority)
# Exit status: non-zero when a target found something (its artifact is printed).
set -euo pipefail
cd "$(dirname "$0")/.."

target=${1:-all}
seconds=${2:-20}
all_targets=(fuzz_llama2c fuzz_quant_codec fuzz_sampler_chain fuzz_speculative fuzz_prefix_trie fuzz_attention_options fuzz_trace fuzz_gguf fuzz_gguf_model fuzz_tokenizer fuzz_detokenizer fuzz_ggml_weights fuzz_gbnf fuzz_json_schema fuzz_grammar_matcher)
if [ "$target" = all ]; then
  targets=("${all_targets[@]}")
else
  targets=("$target")
fi

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j"${FUZZ_BUILD_JOBS:-2}" --target "${targets[@]}"

nice_cmd=()
if [ -n "${FUZZ_NICE:-}" ]; then nice_cmd=(nice -n "$FUZZ_NICE"); fi
status=0
for t in "${targets[@]}"; do
  corpus=build/fuzz/corpus/$t artifacts=build/fuzz/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  log=build/fuzz/$t.log
  set +e
  "${nice_cmd[@]}" build/fuzz/tests/fuzz/"$t" -max_total_time="$seconds" -max_len=4096 -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" tests/fuzz/corpus/"$t" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  if [ $rc -eq 0 ]; then
    echo "fuzz: $t ok: ${seconds}s, ${execs:-?} executions, coverage ${cov:-?} edges"
  else
    status=1
    echo "fuzz: $t FOUND A PROBLEM (exit $rc); log $log; artifacts:" >&2
    ls "$artifacts" >&2
    grep -E 'ERROR|FUZZ_CHECK|SUMMARY|terminate' "$log" | head -5 >&2
  fi
done
exit $status
