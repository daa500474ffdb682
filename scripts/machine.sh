#!/usr/bin/env bash
# Prints one line naming the machine and the instruction set a build directory compiled for:
#   CPU <model> (<vendor> family F model M); N logical CPUs; build ISA: <ISA> (flags); load L
# Usage: scripts/machine.sh [build dir]      (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
build_isa() {
  local cache=$build/CMakeCache.txt cxx flags macros isa ext="" m
  [ -f "$cache" ] || { echo "unknown (no $cache)"; return; }
  cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")
  flags=$(sed -n 's/^CMAKE_CXX_FLAGS:[A-Z]*=//p' "$cache")
  [ "$(sed -n 's/^INFERKIT_NATIVE:[A-Z]*=//p' "$cache")" = ON ] && flags="$flags -march=native"
  [ "$(sed -n 's/^INFERKIT_FORCE_SCALAR:[A-Z]*=//p' "$cache")" = ON ] && { echo "scalar (INFERKIT_FORCE_SCALAR; flags:${flags:- none})"; return; }
  # shellcheck disable=SC2086
  macros=$("$cxx" $flags -dM -E -x c++ /dev/null 2>/dev/null || true)
  has() { grep -q "#define __$1__ " <<<"$macros"; }
  if has AVX512F; then
    for m in BW DQ VL VNNI BF16 FP16; do has "AVX512$m" && ext="$ext $m"; done
    isa="AVX-512 (F$ext)"
  elif has AVX2; then
    isa="AVX2"; has FMA && isa="$isa + FMA"; has F16C && isa="$isa + F16C"; has AVXVNNI && isa="$isa + AVX-VNNI"
  else
    isa="SSE2"
  fi
  echo "$isa (flags:${flags:- none})"
}
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
fam=$(lscpu 2>/dev/null | sed -n 's/^CPU family: *//p' | head -1)
mod=$(lscpu 2>/dev/null | sed -n 's/^Model: *//p' | head -1)
vendor=$(lscpu 2>/dev/null | sed -n 's/^Vendor ID: *//p' | head -1)
echo "CPU ${cpu:-unknown} (${vendor:-?} family ${fam:-?} model ${mod:-?}); $(nproc) logical CPUs; build ISA: $(build_isa); $(date -u '+%Y-%m-%d %H:%M UTC'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
