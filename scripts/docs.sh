#!/usr/bin/env bash
# Builds the API reference (Doxygen HTML in build/docs/html, front page = docs/api_mainpage.md)
# and fails when a public symbol (anything outside `detail`) is undocumented.
# Usage: scripts/docs.sh            (installs doxygen when missing, through scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p build/docs
rm -f build/docs/warnings.log
doxygen docs/Doxyfile
if [ -s build/docs/warnings.log ]; then
  echo "docs: $(wc -l < build/docs/warnings.log) Doxygen warnings (undocumented public API or bad doc markup):" >&2
  sed 's|^.*/include/|include/|' build/docs/warnings.log | head -50 >&2
  exit 1
fi
echo "docs: every public symbol documented; open build/docs/html/index.html"
