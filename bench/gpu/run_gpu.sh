#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root (device tool, `.carry` carried with the .deb files of
# scripts/device/fetch-debs.sh in .carry/debs): builds what the GPU checks need against the machine's
# PyTorch, then runs the steps asked for, in order:
#
#   bench/gpu/run_gpu.sh [STEPS] [bench_gpu args...]     STEPS: comma-separated, default all
#     build    only the build
#     tests    the gpu-labelled tests and the CPU device tests (ctest), then test_device_cuda directly
#     bench    bench_gpu, every section unless args say otherwise -> gpu.json
#     peer     bench/gpu/peer_transformers.py (orbit's logits vs transformers') -> peer.json
#     profile  Nsight Compute on the relocation and paged-attention kernels -> ncu.txt, and the GPU time of
#              the TTFT arms by kernel -> ncu-ttft.txt
#     prefix   bench/gpu/peer_prefix_cache.py (transformers' own KV cache as the prefix-cache arm)
#     serve    `orbit serve --device cuda --dtype bfloat16` under bench/serve/decode_load.py (16 sessions
#              against one, n = 8 forks against 8 requests) -> serve.json
#     shared   bench_shared on cuda, bfloat16: 8 windows of the same 4 chunks, shared canonical pages with
#              per-window patch factors read by the paged kernel against patched private copies: pool
#              bytes and decode speed side by side -> shared.json, shared.log (copied to
#              bench/gpu/results/shared.json, make_report.py reports its bytes as measured)
#     all      tests,bench,peer,prefix,serve,shared
#
# The build is incremental: a warm machine's build-gpu is reused. ORBIT_COMMIT names the commit bench_gpu
# records (the device's copy of the tree has no .git). Logs and results go to $OUT (env.txt,
# build.log, ctest.log, test_device_cuda.log, bench.log, gpu.json, peer.json, peer_prefix.json, serve.log,
# serve.json, ncu.txt, ncu-ttft.txt).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/orbit-gpu}"
mkdir -p "$out"
source scripts/device/deps-env.sh
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvcc --version | tail -2;
  python3 -c 'import torch;print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'; } > "$out/env.txt" 2>&1
steps="${1:-all}"
shift || true
[ "$steps" = all ] && steps=tests,bench,peer,prefix,serve,shared
start=$(date +%s)
if [ ! -f build-gpu/build.ninja ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DORBIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DORBIT_TESTS=ON -DORBIT_PYTHON=OFF -DORBIT_SAMPLES=OFF "${orbit_deps_cmake_args[@]}" > "$out/configure.log" 2>&1 \
    || { tail -30 "$out/configure.log"; exit 1; }
fi
targets=(bench_gpu test_paged_attention_cuda test_device_cuda test_rope_cuda test_patch_apply_cuda test_svd_cuda
         test_store_cuda test_forward_batch_cuda test_serve_cuda test_paged_attention test_device)
[[ ",$steps," == *,peer,* || ",$steps," == *,serve,* ]] && targets+=(orbit_cli)  # these drive the CLI
[[ ",$steps," == *,shared,* ]] && targets+=(bench_shared)
ninja -C build-gpu -j"$(nproc)" -k 0 "${targets[@]}" > "$out/build.log" 2>&1
build_rc=$?
grep -E "error|FAILED" "$out/build.log" | head -30
echo "built in $(( $(date +%s) - start )) s (ninja rc=$build_rc)"
rc=$build_rc
for step in ${steps//,/ }; do
  start=$(date +%s)
  case "$step" in
    build) ;;  # the build above is all
    tests)
      env "${ORBIT_DEPS_RUN[@]}" OMP_NUM_THREADS=4 ctest --test-dir build-gpu --timeout 300 -R 'cuda|test_paged_attention|test_device' -E test_device_cuda -j4 \
        --output-on-failure > "$out/ctest.log" 2>&1
      trc=$?
      grep -E "Test +#|tests passed|tests failed" "$out/ctest.log" | head -40
      # Run directly: its WARN lines carry the measured errors against the CPU oracle.
      env "${ORBIT_DEPS_RUN[@]}" OMP_NUM_THREADS=8 timeout 300 ./build-gpu/tests/test_device_cuda > "$out/test_device_cuda.log" 2>&1
      drc=$?
      grep -E "rel error|passed|failed|FAILED" "$out/test_device_cuda.log" | head -60
      echo "tests: ctest rc=$trc, test_device_cuda rc=$drc in $(( $(date +%s) - start )) s"
      [ "$trc" -ne 0 ] && rc=$trc
      [ "$drc" -ne 0 ] && rc=$drc ;;
    bench)
      name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
      # The device has no .git: the caller passes the commit in ORBIT_COMMIT.
      commit="${ORBIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
      env "${ORBIT_DEPS_RUN[@]}" ./build-gpu/bench/bench_gpu --device-name "$name" --commit "$commit" --json "$out/gpu.json" "$@" 2>&1 |
        tee "$out/bench.log"
      echo "bench in $(( $(date +%s) - start )) s" ;;
    peer)
      env "${ORBIT_DEPS_RUN[@]}" PYTHONUNBUFFERED=1 python3 bench/gpu/peer_transformers.py build-gpu/cli/orbit "$out/peer.json" 2>&1 | tail -20
      echo "peer check in $(( $(date +%s) - start )) s" ;;
    prefix)
      PYTHONUNBUFFERED=1 python3 bench/gpu/peer_prefix_cache.py "$out/peer_prefix.json" 2>&1 | tail -20
      echo "transformers prefix cache in $(( $(date +%s) - start )) s" ;;
    serve)
      env "${ORBIT_DEPS_RUN[@]}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4 python3 bench/serve/decode_load.py \
        --orbit build-gpu/cli/orbit --device cuda --dtype bfloat16 --tokens 300 --json "$out/serve.json" 2>&1 |
        tee "$out/serve.log" | tail -12
      echo "serve in $(( $(date +%s) - start )) s" ;;
    shared)
      env "${ORBIT_DEPS_RUN[@]}" OMP_NUM_THREADS=1 ./build-gpu/bench/bench_shared --device cuda --dtype bfloat16 \
        --reps 5 --cache /tmp/orbit-bench-models --json "$out/shared.json" 2>&1 | tee "$out/shared.log"
      echo "shared in $(( $(date +%s) - start )) s" ;;
    profile)
      # The relocation and paged-attention kernels in detail, then where the GPU time of one TTFT forward
      # goes (W = 32768, B = 2048, 8 layers), arm by arm through bench_gpu's NVTX ranges.
      ncu --clock-control none -k 'regex:patch_apply|paged_attention' --launch-count 6 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
        ./build-gpu/bench/bench_gpu --sections reloc --layers 2 --windows 32768 --reps 1 --json /tmp/ncu.json \
        > "$out/ncu.txt" 2>&1
      grep -E "patch_apply|paged_attention|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per" "$out/ncu.txt" | head -40
      for arm in query_alone orbit_paged orbit_copy; do
        ncu --clock-control none --nvtx --nvtx-include "$arm/" --metrics gpu__time_duration.sum --csv \
          ./build-gpu/bench/bench_gpu --sections ttft --layers 8 --windows 32768 --chunks 2048 --reps 1 \
          --json /tmp/ncu-ttft.json > "/tmp/ncu-$arm.csv" 2>&1
        echo "== $arm (8 layers, warm-up + 1 run)" | tee -a "$out/ncu-ttft.txt"
        python3 bench/gpu/ncu_summary.py "/tmp/ncu-$arm.csv" 2>&1 | tee -a "$out/ncu-ttft.txt"
      done
      echo "profile in $(( $(date +%s) - start )) s" ;;
    *) echo "error: unknown step '$step' (build, tests, bench, peer, prefix, serve, shared, profile, all)" >&2; exit 2 ;;
  esac
done
exit $rc
