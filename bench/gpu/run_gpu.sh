#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root (device tool, `.carry` carried with the .deb files of
# scripts/device/fetch-debs.sh in .carry/debs): builds only what the GPU checks need against the machine's
# PyTorch, runs the gpu-labelled tests and the new CPU device tests, then bench_gpu.
#
#   bench/gpu/run_gpu.sh [tests|peer|bench|all] [bench_gpu args...]   (peer: bench/gpu/peer_transformers.py)
#
# Logs and results go to $OUT (env.txt, build.log, ctest.log, bench.log, gpu.json).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/orbit-gpu}"
mkdir -p "$out" /tmp/deps
for f in .carry/debs/*.deb; do dpkg -x "$f" /tmp/deps; done
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvcc --version | tail -2;
  python3 -c 'import torch;print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'; } > "$out/env.txt" 2>&1
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DORBIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DORBIT_TESTS=ON -DORBIT_PYTHON=OFF -DORBIT_SAMPLES=OFF \
  -DCMAKE_PREFIX_PATH="$torch_prefix;/tmp/deps/usr" -DOPENSSL_ROOT_DIR=/tmp/deps/usr > "$out/configure.log" 2>&1 \
  || { tail -30 "$out/configure.log"; exit 1; }
targets=(orbit_cli bench_gpu test_paged_attention_cuda test_device_cuda test_rope_cuda test_patch_apply_cuda test_svd_cuda
         test_paged_attention test_device)
ninja -C build-gpu -j"$(nproc)" -k 0 "${targets[@]}" > "$out/build.log" 2>&1
build_rc=$?
grep -E "error|FAILED" "$out/build.log" | head -30
echo "built in $(( $(date +%s) - start )) s (ninja rc=$build_rc)"
mode="${1:-all}"
shift || true
rc=0
if [ "$mode" = tests ] || [ "$mode" = all ]; then
  start=$(date +%s)
  OMP_NUM_THREADS=4 ctest --test-dir build-gpu -R 'cuda|test_paged_attention|test_device' -E test_device_cuda -j4 \
    --output-on-failure > "$out/ctest.log" 2>&1
  rc=$?
  grep -E "Test +#|tests passed|tests failed" "$out/ctest.log" | head -40
  echo "ctest rc=$rc in $(( $(date +%s) - start )) s"
  # Run directly: its WARN lines carry the measured errors against the CPU oracle.
  OMP_NUM_THREADS=8 ./build-gpu/tests/test_device_cuda > "$out/test_device_cuda.log" 2>&1
  drc=$?
  grep -E "rel error|passed|failed|FAILED" "$out/test_device_cuda.log" | head -60
  echo "test_device_cuda rc=$drc in $(( $(date +%s) - start )) s total"
  [ "$drc" -ne 0 ] && rc=$drc
fi
if [ "$mode" = peer ] || [ "$mode" = all ]; then
  start=$(date +%s)
  PYTHONUNBUFFERED=1 python3 bench/gpu/peer_transformers.py build-gpu/cli/orbit "$out/peer.json" 2>&1 | tail -20
  echo "peer check in $(( $(date +%s) - start )) s"
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  start=$(date +%s)
  ./build-gpu/bench/bench_gpu --device-name "$name" --json "$out/gpu.json" "$@" 2>&1 | tee "$out/bench.log"
  echo "bench in $(( $(date +%s) - start )) s"
fi
exit $rc
