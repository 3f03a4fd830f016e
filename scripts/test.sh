#!/usr/bin/env bash
# Every test: install what is missing, build with tests and warnings as errors, run the C++ tests (CTest)
# and the Python tests, install into a temporary prefix and build samples/cpp against it, then the sanitizer
# stages: the fast C++ tests under ASan+UBSan, the thread tests and one orbit serve run under TSan (scripts/sanitize.sh, each in
# its own build directory), and the fuzz stage: each libFuzzer target for a bounded time (scripts/fuzz.sh,
# build-fuzz, clang).
# Env: ORBIT_SANITIZERS=0 skips the sanitizer stages, ORBIT_FUZZ=0 the fuzz stage (ORBIT_FUZZ_SECONDS: per
# target); ORBIT_BUILD, ORBIT_JOBS (scripts/common.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

step "Code comments cite no tracker issue numbers (readers of the code cannot see the tracker)"
if git -C "$ORBIT_ROOT" grep -nE '[Ii]ssue [0-9]+|[Ii]ssue #[0-9]+' -- '*.cpp' '*.h' '*.cu' '*.cuh' '*.py' '*.pyi' \
    '*.sh' 'CMakeLists.txt' '*.cmake'; then
  echo "error: the lines above cite issue numbers; say what the code does instead" >&2
  exit 1
fi

stage_start=$SECONDS
orbit_install_packages

step "Hugging Face tokenizers for Node (the tokenizer.json oracle test; it reports skipped without them)"
if command -v npm >/dev/null; then
  npm install --prefix "$ORBIT_ROOT/tests/node" --no-audit --no-fund --no-package-lock \
    || echo "warning: npm install failed: test_hf_tokenizer_oracle will report skipped" >&2
else
  echo "warning: npm not found: test_hf_tokenizer_oracle will report skipped" >&2
fi

step "Format: the C++/CUDA sources match .clang-format (scripts/check-format.sh; fix with clang-format -i)"
"$ORBIT_ROOT/scripts/check-format.sh"
timings=("packages, npm and format: $((SECONDS - stage_start)) s")

stage_start=$SECONDS
orbit_build -DORBIT_TESTS=ON -DORBIT_PYTHON=ON -DORBIT_WERROR=ON
timings+=("build: $((SECONDS - stage_start)) s")

# ctest runs ORBIT_JOBS tests at once: each test's OpenMP and BLAS threads get their share of the cores, as
# oversubscribed OpenMP threads spin-wait on each other (on 2 cores, a replay ran 4x slower with 2 threads
# per test than with 1 while another test ran beside it). A thread count set by the caller is kept; the
# tests that compare two thread counts (a CLI against the library in process) set their own.
cores=$(orbit_cores)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$((cores / ORBIT_JOBS > 0 ? cores / ORBIT_JOBS : 1))}"

step "C++ tests (ctest; labels: cpu, model, gpu, slow; OMP_NUM_THREADS=$OMP_NUM_THREADS per test)"
stage_start=$SECONDS
ctest --test-dir "$ORBIT_BUILD" --output-on-failure -j "$ORBIT_JOBS"
timings+=("C++ tests: $((SECONDS - stage_start)) s")

# pytest-xdist runs ORBIT_JOBS tests at once; the files with expensive module fixtures stay on one worker
# each (pytest.mark.xdist_group), so those fixtures run once.
pytest_jobs=()
/usr/bin/python3 -c "import xdist" 2>/dev/null && pytest_jobs=(-n "$ORBIT_JOBS" --dist loadgroup)
stage_start=$SECONDS
step "Python tests (pytest, Debian's /usr/bin/python3${pytest_jobs[*]:+, ${ORBIT_JOBS} workers})"
ORBIT_CLI="$ORBIT_BUILD/cli/orbit" ORBIT_MODELS_DIR="$ORBIT_ROOT/models" ORBIT_PYTHON_PATH="$ORBIT_BUILD/bindings/python" \
  /usr/bin/python3 -m pytest -q --durations=15 "${pytest_jobs[@]}" "$ORBIT_ROOT/tests/python"
timings+=("Python tests: $((SECONDS - stage_start)) s")

stage_start=$SECONDS
"$ORBIT_ROOT/scripts/check-install.sh"
timings+=("install check: $((SECONDS - stage_start)) s")

if [ "${ORBIT_SANITIZERS:-1}" != 0 ]; then
  for mode in address thread; do
    stage_start=$SECONDS
    "$ORBIT_ROOT/scripts/sanitize.sh" "$mode"
    timings+=("sanitizer stage $mode: $((SECONDS - stage_start)) s")
  done
else
  step "Sanitizer stages skipped (ORBIT_SANITIZERS=0)"
fi

if [ "${ORBIT_FUZZ:-1}" != 0 ]; then
  stage_start=$SECONDS
  "$ORBIT_ROOT/scripts/fuzz.sh"
  timings+=("fuzz stage: $((SECONDS - stage_start)) s")
else
  step "Fuzz stage skipped (ORBIT_FUZZ=0)"
fi

step "All tests passed"
printf '  %s\n' "${timings[@]}"
