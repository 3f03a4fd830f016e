#!/usr/bin/env bash
# Lists the C++ functions longer than a limit (lines from signature to closing brace), longest first, and the
# files longer than a second limit. Lambdas count toward the function around them, not on their own.
#   scripts/long-functions.sh                 functions over 100 lines, files over 600, in the default dirs
#   scripts/long-functions.sh -n 60 -f 400    other limits
#   scripts/long-functions.sh DIR|FILE...     other places (default: sdk runtime cli store bindings/python/src)
# Output: "LINES  FUNCTION  FILE:LINE", then "LINES  FILE". Needs universal-ctags (Debian: universal-ctags).
# Exit status: 0 always (a report, not a check), 2 without ctags.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
max_fn=100
max_file=600
while getopts "n:f:" o; do
  case "$o" in
    n) max_fn="$OPTARG" ;;
    f) max_file="$OPTARG" ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- sdk runtime cli store bindings/python/src
ctags --version 2>/dev/null | grep -q Universal || { echo "error: universal-ctags not found" >&2; exit 2; }
mapfile -t files < <(git ls-files -- "$@" | grep -E '\.(h|hpp|cpp|cc)$')
[ ${#files[@]} -gt 0 ] || exit 0

echo "functions over $max_fn lines:"
# Name, scope, scope kind, file, first and last line; a member is shown as Class::name.
ctags --languages=C++ --kinds-C++=f --fields=+nep -x --_xformat='%N	%{scope}	%{scopeKind}	%F	%n	%{end}' "${files[@]}" |
  awk -F'\t' -v max="$max_fn" '$1 !~ /^__anon/ && $6 != "" {
    n = $6 - $5 + 1
    name = $1
    if ($3 == "class" || $3 == "struct") { k = split($2, part, "::"); name = part[k] "::" $1 }
    if (n > max) printf "%5d  %s  %s:%d\n", n, name, $4, $5
  }' | sort -k1,1rn -k2

echo "files over $max_file lines:"
wc -l "${files[@]}" | awk -v max="$max_file" '$2 != "total" && $1 > max { printf "%5d  %s\n", $1, $2 }' | sort -rn
