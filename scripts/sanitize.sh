#!/usr/bin/env bash
# The C++ tests under sanitizers, each in its own build directory:
#
#   scripts/sanitize.sh address   ASan + UBSan (build-asan): the fast tests (label cpu, not slow) listed below
#   scripts/sanitize.sh thread    TSan (build-tsan): the tests labelled `thread`, then one short end-to-end
#                                 run of `orbit serve` built with TSan (scripts/tsan_serve.py: concurrent chat
#                                 and responses requests, streams, clients that leave midway, stored answers)
#
# Only the libraries and the executables of the listed tests are built (no CUDA, Python module, benchmarks,
# samples): those tests grouped into shared executables of their own (ORBIT_TEST_SELECT, tests/orbit_tests.cmake;
# the main build's groups would bring every test file grouped with them). Without -Werror: the main build enforces warnings on the same sources, and GCC's flow-based
# warnings give false positives on instrumented code (-Wuninitialized in Boost.Optional under ASan at -O1).
# Any sanitizer report fails the test: ASan, UBSan
# (-fno-sanitize-recover) and TSan (halt_on_error) end the process with an error status.
# UBSan's alignment and null checks are left out of the address stage (ORBIT_SANITIZE_EXCLUDE): they instrument
# every member access of every inline template (ATen, nlohmann, Catch, the standard library) and were a third
# of its compile time (an sdk unity object: 27.2 s with them, 17.3 s without, 15.9 s with ASan alone). ASan
# reports a null dereference itself (SEGV, with its stack); the fuzzers (scripts/fuzz.sh) keep both checks on
# the parsers of outside input, where a misaligned read would come from. ORBIT_UBSAN_EXCLUDE= keeps them.
# scripts/test.sh runs both stages after the main tests; ORBIT_SANITIZERS=0 skips them there.
# Env: ORBIT_JOBS (parallel jobs), ORBIT_ASAN_BUILD / ORBIT_TSAN_BUILD (build directories),
#      ORBIT_SANITIZE_FLAGS (the libraries' optimization and debug flags, default -O0 -g1), ORBIT_UNITY,
#      ORBIT_UBSAN_EXCLUDE (the address stage's UBSan checks left out, default alignment,null).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

mode="${1:-}"
tools=OFF  # the orbit CLI and tools/train are configured (only `orbit` is built) in thread mode only
case "$mode" in
  address)
    build="${ORBIT_ASAN_BUILD:-$ORBIT_ROOT/build-asan}"
    sanitize="address,undefined"
    exclude="${ORBIT_UBSAN_EXCLUDE-alignment,null}"
    # The cpu tests that are not slow and run no CLI, chosen for coverage per build minute: the store
    # (tiers, faults, the kill child), the window and its plans, the engine's tiers and threads, traces,
    # the pool, RoPE, the planner and the loaders. Each is a CTest name (an executable of that name, unless
    # mapped in `targets` below).
    tests=(test_common test_rope test_kv_pool test_safetensors test_planner test_dependency_graph
           test_model test_window test_window_defer test_plan_actions test_apply_decisions test_engine_tiers test_engine_threads
           test_store_tiers test_store_faults test_store_crashes test_store_threads)
    ;;
  thread)
    build="${ORBIT_TSAN_BUILD:-$ORBIT_ROOT/build-tsan}"
    sanitize="thread"
    exclude=""
    tests=()  # filled from the `thread` label below
    tools=ON  # the orbit CLI, for the serve run
    ;;
  *)
    echo "usage: scripts/sanitize.sh address|thread" >&2
    exit 2
    ;;
esac

step "Configuring $build (ORBIT_SANITIZE=$sanitize${exclude:+, without $exclude})"
mkdir -p "$build"  # its configure log goes inside it, out of the source tree
generator=()
[ -f "$build/CMakeCache.txt" ] || generator=(-G Ninja)
# -O0 -g1 for the libraries (and -O0 for the tests' own code, tests/CMakeLists.txt): line tables for the reports'
# stacks, assertions on (no NDEBUG), and the quickest to compile: on 2 cores the ASan stage took 388 s at -O0
# (run alone) against 480 s at -O1 (in a fresh test.sh run; its tests ran 49 s against 37 s: most of their
# time is in libtorch, which is not rebuilt), the TSan stage 165 s against 193 s. ORBIT_SANITIZE_FLAGS
# replaces them.
# $1: the tests grouped into shared executables (;-separated; the others get executables of their own).
configure() {
  cmake -S "$ORBIT_ROOT" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="${ORBIT_SANITIZE_FLAGS:--O0 -g1}" -DCMAKE_UNITY_BUILD="$ORBIT_UNITY" \
    -DORBIT_SANITIZE="$sanitize" -DORBIT_SANITIZE_EXCLUDE="$exclude" -DORBIT_WERROR=OFF -DORBIT_TESTS=ON -DORBIT_TEST_GROUPS=ON -DORBIT_TEST_SELECT="$1" \
    -DORBIT_CUDA=OFF -DORBIT_PYTHON=OFF -DORBIT_BENCH=OFF -DORBIT_SAMPLES=OFF -DORBIT_TOOLS="$tools" -DORBIT_INSTALL=OFF \
    >"$build/orbit-configure.log" 2>&1 || { cat "$build/orbit-configure.log" >&2; exit 1; }
  generator=()
}

if [ "$mode" = thread ]; then
  configure ""
  mapfile -t tests < <(ctest --test-dir "$build" -N -L thread | sed -nE 's/^ *Test +#[0-9]+: +([A-Za-z0-9_]+)$/\1/p')
  [ ${#tests[@]} -gt 0 ] || { echo "error: no test carries the label thread" >&2; exit 1; }
fi
configure "$(IFS=';'; echo "${tests[*]}")"
regex="^($(IFS='|'; echo "${tests[*]}"))\$"

# The executables those CTest entries run (a shared one for the grouped tests; an entry such as
# test_store_threads runs a part of another test's cases).
mapfile -t targets < <(/usr/bin/python3 -c '
import os, re, sys
text = open(sys.argv[1]).read()
for name in sys.argv[2:]:
    m = re.search(r"^add_test\(\[=\[" + re.escape(name) + r"\]=\] \"([^\"]+)\"", text, re.M)
    if not m:
        sys.exit(f"error: no CTest entry {name} in {sys.argv[1]}")
    print(os.path.basename(m.group(1)))' "$build/tests/CTestTestfile.cmake" "${tests[@]}" | sort -u)
if [ "$mode" = thread ]; then targets+=(orbit); fi

step "Building ${#targets[@]} test executables with $ORBIT_JOBS jobs: ${targets[*]}"
cmake --build "$build" -j "$ORBIT_JOBS" --target "${targets[@]}"

# halt_on_error / abort: the first report fails the test. detect_leaks: LeakSanitizer (gcc's libasan has it).
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# ignore_noninstrumented_modules: libtorch is not built with TSan, so the allocations, frees and reference
# counts it makes itself are invisible to TSan; without this, freeing a tensor that libtorch allocated
# (a store value's, dropped by the last holder on another thread) is reported as racing with every earlier
# read of it (test_store_threads, every run). Races between accesses in orbit's own code are still
# reported.
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
step "Running under $sanitize: ${tests[*]}"
ctest --test-dir "$build" -R "$regex" --output-on-failure -j "$ORBIT_JOBS"
if [ "$mode" = thread ]; then
  # halt_on_error=0: one run prints every race (the server still exits with TSan's status 66 after any).
  serve_start=$SECONDS
  step "orbit serve under TSan: concurrent chat and responses requests, streams, clients that leave (scripts/tsan_serve.py)"
  TSAN_OPTIONS="$TSAN_OPTIONS:halt_on_error=0" /usr/bin/python3 "$ORBIT_ROOT/scripts/tsan_serve.py" \
    "$build/cli/orbit" "$ORBIT_ROOT/models/stories260K/stories260K.bin"
  echo "serve run: $((SECONDS - serve_start)) s"
fi
step "Sanitizer stage passed ($sanitize)"
