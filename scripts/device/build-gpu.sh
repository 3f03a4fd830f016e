#!/usr/bin/env bash
# Run ON THE GPU MACHINE (device tool, repository root, `.carry` carried): unpacks the .deb files that
# scripts/device/fetch-debs.sh put in .carry/debs into /tmp/deps (never into /), configures build-gpu against
# the machine's PyTorch libtorch with the CUDA kernels for Hopper, builds, then runs what is asked:
#
#   scripts/device/build-gpu.sh [gpu|all|none] [ctest args...]   gpu (default): ctest -L gpu;  all: every test
#
# Logs go to $OUT (configure.log, build.log, ctest.log, env.txt) when OUT is set. Env: ORBIT_CUDA_ARCH
# (default 90), ORBIT_TEST_JOBS (default 4), ORBIT_TEST_THREADS (OpenMP threads per test, default 4: twelve
# tests at sixteen threads each swamp sixteen cores and time out).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/orbit-device-logs}"
mkdir -p "$out"
source scripts/device/deps-env.sh
{ nvidia-smi; nvcc --version; python3 -c 'import torch;print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'; } > "$out/env.txt" 2>&1
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DORBIT_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${ORBIT_CUDA_ARCH:-90}" -DORBIT_TESTS=ON -DORBIT_PYTHON=OFF \
  "${orbit_deps_cmake_args[@]}" > "$out/configure.log" 2>&1 \
  || { tail -30 "$out/configure.log"; exit 1; }
# -k 0: a target that fails to build (its error printed below) does not stop the tests of the others.
build_rc=0
ninja -C build-gpu -j"$(nproc)" -k 0 > "$out/build.log" 2>&1 || build_rc=$?
grep -E "error:|FAILED:" "$out/build.log" | head -30
echo "configured and built in $(( $(date +%s) - start )) s (ninja rc=$build_rc)"
case "${1:-gpu}" in
  gpu) label=(-L gpu) ;;
  all) label=() ;;
  none) exit 0 ;;
  *) echo "error: unknown argument '$1' (gpu, all or none)" >&2; exit 2 ;;
esac
start=$(date +%s)
env "${ORBIT_DEPS_RUN[@]}" OMP_NUM_THREADS="${ORBIT_TEST_THREADS:-4}" ctest --test-dir build-gpu "${label[@]}" -j"${ORBIT_TEST_JOBS:-4}" \
  --output-on-failure "${@:2}" > "$out/ctest.log" 2>&1
rc=$?
grep -E "Test +#|tests passed|tests failed" "$out/ctest.log" | tail -40
echo "ctest rc=$rc in $(( $(date +%s) - start )) s"
[ "$rc" -eq 0 ] && rc=$build_rc
exit $rc
