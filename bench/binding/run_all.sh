#!/bin/sh
# Runs every binding experiment and regenerates the charts and bench/REPORT.md from the JSON.
#   bench/binding/run_all.sh [BUILD_DIR] [extra bench_binding flags, e.g. --threads 2]
# From the repository root. BUILD_DIR defaults to build-binding; bench_binding is built there first.
set -eu
BUILD=${1:-build-binding}
[ $# -gt 0 ] && shift
ninja -C "$BUILD" -j1 bench_binding
mkdir -p bench/binding/results
"$BUILD/bench/binding/bench_binding" --json bench/binding/results/binding.json "$@" | tee bench/binding/results/binding.txt
/usr/bin/python3 bench/binding/plot_binding.py bench/binding/results/binding.json bench/binding/results
/usr/bin/python3 bench/binding/make_report.py bench/binding/results/binding.json bench/REPORT.md
echo "wrote bench/binding/results/ and bench/REPORT.md"
