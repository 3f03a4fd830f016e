#!/usr/bin/env bash
# Installs a built tree into a temporary prefix and uses it as a user would:
#   - every installed file lies under the prefix (nothing in the system's site-packages or /usr/local);
#   - samples/cpp, a stand-alone CMake project, finds the package (find_package(orbit)), links orbit::sdk,
#     builds and runs on the bundled model;
#   - the installed CLI answers, and the installed Python package imports from the prefix (when built).
# Env: ORBIT_BUILD (the built tree, default <repo>/build). Run by scripts/test.sh after the tests.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ -f "$ORBIT_BUILD/CMakeCache.txt" ] || { echo "error: $ORBIT_BUILD is not a configured build tree" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}/orbit-install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

# The Python package follows the prefix unless ORBIT_PYTHON_INSTALL_DIR was set to an absolute directory
# (scripts/install-python.sh sets the user's site-packages): then everything but that component is checked.
site="$(sed -n 's/^ORBIT_PYTHON_INSTALL_DIR:[A-Z]*=//p' "$ORBIT_BUILD/CMakeCache.txt")"
component=()
case "$site" in
  /*) echo "note: ORBIT_PYTHON_INSTALL_DIR=$site is absolute: the python component is not installed here"
      component=(--component Unspecified); site="" ;;
  ?*) site="$prefix/$site" ;;
esac

step "cmake --install $ORBIT_BUILD --prefix $prefix ${component[*]}"
cmake --install "$ORBIT_BUILD" --prefix "$prefix" "${component[@]}" | tee "$work/install.log" | grep -c 'Installing:' \
  | sed 's/^/files installed: /'
outside="$(sed -nE 's/^-- (Installing|Up-to-date): //p' "$work/install.log" | grep -v "^$prefix/" || true)"
if [ -n "$outside" ]; then
  printf 'error: installed outside the prefix %s:\n%s\n' "$prefix" "$outside" >&2
  exit 1
fi
[ -f "$prefix/lib/cmake/orbit/orbitConfig.cmake" ] || { echo "error: no lib/cmake/orbit/orbitConfig.cmake" >&2; exit 1; }

step "samples/cpp against the installed package (find_package(orbit), orbit::sdk)"
cmake -S "$ORBIT_ROOT/samples/cpp" -B "$work/sample" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/sample-configure.log" || { cat "$work/sample-configure.log" >&2; exit 1; }
cmake --build "$work/sample" -j "$ORBIT_JOBS"
out="$("$work/sample/quickstart" "$ORBIT_ROOT/models/stories260K/stories260K.bin")"
printf '%s\n' "$out"
grep -q '^generated:' <<<"$out" || { echo "error: the installed quickstart generated nothing" >&2; exit 1; }

step "the installed CLI and Python package"
"$prefix/bin/orbit" --help >/dev/null
if [ -n "$site" ]; then
  (cd / && PYTHONPATH="$site" /usr/bin/python3 -c "
import orbit, orbit.aio, sys
assert orbit.__file__.startswith('$prefix/'), orbit.__file__
print('import orbit from the prefix:', orbit.__file__)")
fi
step "Install check passed"
