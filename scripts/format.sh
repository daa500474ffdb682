#!/usr/bin/env bash
# Applies .clang-format to every C++ file of the project (include/, tests/, bench/, examples/).
# Usage: scripts/format.sh            (rewrites files in place)
#        scripts/format.sh --check    (lists files that differ from the style; exit 1 if any)
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'include/*.hpp' 'tests/*.cpp' 'tests/*.hpp' 'bench/*.cpp' 'bench/*.hpp' \
                                  'examples/*.cpp' 'examples/*.hpp' | grep -v '/corpus/')
if [ "${1:-}" = "--check" ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then echo "format: $f differs from .clang-format"; bad=1; fi
  done
  [ "$bad" -eq 0 ] && echo "format: ${#files[@]} files match .clang-format"
  exit "$bad"
fi
clang-format -i "${files[@]}"
echo "format: ${#files[@]} files formatted"
