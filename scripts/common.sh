# Shared steps for scripts/main.sh and scripts/test.sh: install what is missing, configure, build.
# Sourced, not run. Idempotent: a second run installs nothing and rebuilds only what changed.

ORBIT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ORBIT_BUILD="${ORBIT_BUILD:-$ORBIT_ROOT/build}"
# The machine's cores, whatever OMP_NUM_THREADS says (GNU nproc reports OMP_NUM_THREADS when it is set, and
# test.sh sets it for the tests it runs side by side).
orbit_cores() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }
ORBIT_JOBS="${ORBIT_JOBS:-$(orbit_cores)}"
# Unity builds (CMAKE_UNITY_BUILD: each library's sources compiled in batches of 8, so the torch and JSON
# headers are parsed once per batch): the scripts build from scratch far more often than they rebuild one
# file. ORBIT_UNITY=OFF when you edit and rebuild often.
ORBIT_UNITY="${ORBIT_UNITY:-ON}"

# Debian 12 packages orbit builds and tests with (README "Dependencies" says what each is for).
ORBIT_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libopenblas0-openmp libssl-dev nlohmann-json3-dev libboost-graph-dev libsqlite3-dev
  libhiredis-dev redis-server redis-tools openssl libpcre2-dev libicu-dev libcpp-httplib-dev
  catch2 pybind11-dev python3-dev python3-torch python3-numpy python3-pytest python3-pytest-xdist python3-matplotlib
  clang-format nodejs clang libclang-rt-14-dev
)

step() { printf '\n==> %s\n' "$*"; }

orbit_install_packages() {
  local missing=()
  for pkg in "${ORBIT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    step "Debian packages: all ${#ORBIT_PACKAGES[@]} present"
    return
  fi
  step "Installing missing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "error: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
}

orbit_build() {
  step "Configuring ($ORBIT_BUILD)"
  local generator=()
  [ -f "$ORBIT_BUILD/CMakeCache.txt" ] || generator=(-G Ninja)
  cmake -S "$ORBIT_ROOT" -B "$ORBIT_BUILD" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD="$ORBIT_UNITY" -DPython3_EXECUTABLE=/usr/bin/python3 "$@"
  step "Building with $ORBIT_JOBS jobs"
  cmake --build "$ORBIT_BUILD" -j "$ORBIT_JOBS"
}
