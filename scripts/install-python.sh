#!/usr/bin/env bash
# Builds orbit's Python module and installs the package `orbit` for Debian's /usr/bin/python3, without pip or
# network (the build uses Debian's pybind11-dev):
#
#   scripts/install-python.sh          then, from any directory:   /usr/bin/python3 -c "import orbit"
#
# Installs into the user's site-packages (python3 -m site --user-site) unless ORBIT_PYTHON_SITE names another
# directory (e.g. /usr/local/lib/python3/dist-packages as root). The module is self-contained apart from
# Debian's shared libraries (libtorch, OpenBLAS, SQLite, OpenSSL), so the build directory may be removed.
# Env: ORBIT_BUILD (build directory, default <repo>/build), ORBIT_JOBS (parallel jobs), ORBIT_PYTHON_SITE.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PYTHON=/usr/bin/python3
SITE="${ORBIT_PYTHON_SITE:-$("$PYTHON" -m site --user-site)}"

orbit_install_packages
step "Configuring ($ORBIT_BUILD) with the Python module"
generator=()
[ -f "$ORBIT_BUILD/CMakeCache.txt" ] || generator=(-G Ninja)
cmake -S "$ORBIT_ROOT" -B "$ORBIT_BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DPython3_EXECUTABLE="$PYTHON" -DORBIT_PYTHON=ON -DORBIT_PYTHON_INSTALL_DIR="$SITE"
step "Building the module with $ORBIT_JOBS jobs"
cmake --build "$ORBIT_BUILD" --target orbit_python -j "$ORBIT_JOBS"
step "Installing orbit into $SITE"
mkdir -p "$SITE"
cmake --install "$ORBIT_BUILD" --component python
check="import orbit; print('import orbit OK:', orbit.__file__, 'version', orbit.__version__)"
if (cd / && "$PYTHON" -c "import sys; sys.exit(0 if '$SITE' in sys.path else 1)"); then
  cd / && "$PYTHON" -c "$check"
else
  cd / && PYTHONPATH="$SITE" "$PYTHON" -c "$check"
  echo "note: $SITE is not on $PYTHON's path: add it with PYTHONPATH=$SITE (or a .pth file in site-packages)"
fi
