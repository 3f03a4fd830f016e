#!/usr/bin/env bash
# Every test: install what is missing, build with tests, run the C++ tests (CTest) and the Python tests.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

step "Code comments cite no tracker issue numbers (readers of the code cannot see the tracker)"
if git -C "$ORBIT_ROOT" grep -nE '[Ii]ssue [0-9]+|[Ii]ssue #[0-9]+' -- '*.cpp' '*.h' '*.cu' '*.cuh' '*.py' '*.pyi' \
    '*.sh' 'CMakeLists.txt' '*.cmake'; then
  echo "error: the lines above cite issue numbers; say what the code does instead" >&2
  exit 1
fi

orbit_install_packages
orbit_build -DORBIT_TESTS=ON -DORBIT_PYTHON=ON

step "C++ tests (ctest; labels: cpu, model, gpu, slow)"
ctest --test-dir "$ORBIT_BUILD" --output-on-failure -j "$ORBIT_JOBS"

step "Python tests (pytest, Debian's /usr/bin/python3)"
ORBIT_CLI="$ORBIT_BUILD/cli/orbit" ORBIT_MODELS_DIR="$ORBIT_ROOT/models" ORBIT_PYTHON_PATH="$ORBIT_BUILD/bindings/python" \
  /usr/bin/python3 -m pytest -q "$ORBIT_ROOT/tests/python"

step "All tests passed"
