#!/usr/bin/env bash
# The libFuzzer targets (tests/fuzz), each run for a bounded time from its committed seed corpus:
#
#   scripts/fuzz.sh [TARGET...]     all targets by default
#
# Configures its own build directory with clang (-fsanitize=fuzzer,address,undefined; no CUDA, Python, tests,
# benchmarks, samples or tools), builds only the fuzz targets, and runs each for ORBIT_FUZZ_SECONDS,
# ORBIT_JOBS of them at once (a fuzzer uses one core). New inputs go to a scratch corpus in the build
# directory (the committed seeds under tests/fuzz/corpus/<target>/ are read only). Any crash, sanitizer
# report, timeout or out-of-memory fails the script; the input that caused it is left as
# <build>/artifacts/<target>-crash-<sha1> (replay it with `<build>/tests/fuzz/<target> FILE`) and the run's
# log tail is printed.
# scripts/test.sh runs this as a stage; ORBIT_FUZZ=0 skips it there.
# Env: ORBIT_FUZZ_SECONDS (per target, default 20), ORBIT_FUZZ_BUILD (default build-fuzz), ORBIT_JOBS,
#      ORBIT_FUZZ_CXX / ORBIT_FUZZ_CC (default clang++ / clang; clang-14 works).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

build="${ORBIT_FUZZ_BUILD:-$ORBIT_ROOT/build-fuzz}"
seconds="${ORBIT_FUZZ_SECONDS:-20}"
all_targets=(fuzz_safetensors fuzz_trace fuzz_hf_config fuzz_hf_tokenizer fuzz_redis_manifest fuzz_serve_request
             fuzz_chat_template fuzz_http_request fuzz_json_schema fuzz_tool_calls)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

cxx="${ORBIT_FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}"
cc="${ORBIT_FUZZ_CC:-$(command -v clang || command -v clang-14 || true)}"
[ -n "$cxx" ] && [ -n "$cc" ] || { echo "error: clang not found (Debian package clang, scripts/common.sh)" >&2; exit 1; }

step "Configuring $build (libFuzzer with $cxx)"
mkdir -p "$build"
generator=()
[ -f "$build/CMakeCache.txt" ] || generator=(-G Ninja)
# -O1 -g1 as the sanitizer builds: fast enough to fuzz, line tables for the reports, assertions on.
CC="$cc" CXX="$cxx" cmake -S "$ORBIT_ROOT" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" -DCMAKE_UNITY_BUILD="$ORBIT_UNITY" -DORBIT_FUZZ=ON -DORBIT_WERROR=OFF \
  -DORBIT_TESTS=OFF -DORBIT_CUDA=OFF -DORBIT_PYTHON=OFF -DORBIT_BENCH=OFF -DORBIT_SAMPLES=OFF -DORBIT_TOOLS=OFF \
  -DORBIT_INSTALL=OFF \
  >"$build/orbit-configure.log" 2>&1 || { cat "$build/orbit-configure.log" >&2; exit 1; }

step "Building ${#targets[@]} fuzz targets with $ORBIT_JOBS jobs: ${targets[*]}"
cmake --build "$build" -j "$ORBIT_JOBS" --target "${targets[@]}"

mkdir -p "$build/artifacts" "$build/logs"
for t in "${targets[@]}"; do
  seeds="$ORBIT_ROOT/tests/fuzz/corpus/$t"
  [ -d "$seeds" ] || { echo "error: no seed corpus $seeds" >&2; exit 1; }
done

# One target's run: its summary line on success; on failure its log's tail and status 1.
fuzz_one() {
  local t="$1" start=$SECONDS runs
  local scratch="$build/corpus/$t"
  mkdir -p "$scratch"
  local options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1
                 -artifact_prefix="$build/artifacts/$t-")
  [ -f "$ORBIT_ROOT/tests/fuzz/$t.dict" ] && options+=(-dict="$ORBIT_ROOT/tests/fuzz/$t.dict")
  if "$build/tests/fuzz/$t" "${options[@]}" "$scratch" "$ORBIT_ROOT/tests/fuzz/corpus/$t" >"$build/logs/$t.log" 2>&1; then
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$build/logs/$t.log" | tail -1)
    echo "  $t: ${runs:-?} inputs in $((SECONDS - start)) s, no failure"
  else
    echo "  $t: FAILED after $((SECONDS - start)) s; the end of $build/logs/$t.log:" >&2
    tail -n 40 "$build/logs/$t.log" >&2
    return 1
  fi
}

# Each fuzzer is one process on one core: ORBIT_JOBS of them run at once.
step "Fuzzing ${#targets[@]} targets for $seconds s each, $ORBIT_JOBS at a time (seeds: tests/fuzz/corpus/<target>)"
failed=()
declare -A running=()  # pid -> target
for t in "${targets[@]}"; do
  if [ ${#running[@]} -ge "$ORBIT_JOBS" ]; then
    wait -n -p done_pid "${!running[@]}" || failed+=("${running[$done_pid]}")
    unset "running[$done_pid]"
  fi
  fuzz_one "$t" &
  running[$!]="$t"
done
while [ ${#running[@]} -gt 0 ]; do
  wait -n -p done_pid "${!running[@]}" || failed+=("${running[$done_pid]}")
  unset "running[$done_pid]"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "error: fuzz targets failed: ${failed[*]} (inputs: $build/artifacts/)" >&2
  exit 1
fi
step "Fuzz stage passed (${#targets[@]} targets, $seconds s each)"
