#!/usr/bin/env bash
# Checks that the tracked C++/CUDA sources match .clang-format (no file is changed).
#   scripts/check-format.sh            check every tracked *.h *.cpp *.cu *.cuh
#   scripts/check-format.sh FILE...    check only these files
# Exit status: 0 when all pass, 1 when some file differs (the files are listed), 2 without clang-format.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CLANG_FORMAT="${CLANG_FORMAT:-clang-format}"
command -v "$CLANG_FORMAT" >/dev/null || { echo "error: $CLANG_FORMAT not found (apt-get install clang-format)" >&2; exit 2; }
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
fi
bad=()
for f in "${files[@]}"; do
  "$CLANG_FORMAT" --dry-run --Werror --style=file "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'not formatted (run: %s -i --style=file FILE):\n' "$CLANG_FORMAT" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format: ${#files[@]} files match .clang-format"
