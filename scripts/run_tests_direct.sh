#!/usr/bin/env bash
# Runs every built test binary directly (no ctest, whose files hold this machine's absolute paths)
# and totals them. For the GPU machine: carry build/release, then run this there.
#   scripts/run_tests_direct.sh [results-folder] [gtest args...]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/${FP8ROUTE_PRESET:-release}"
results="${1:-$build/test-results}"; shift || true
rm -rf "$results"; mkdir -p "$results"
export FP8ROUTE_SOURCE_DIR="$root"
rc=0
for t in "$build"/tests/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  start=$(date +%s%N)
  "$t" --gtest_brief=1 --gtest_output="xml:$results/$name.xml" "$@" > "$results/$name.log" 2>&1
  r=$?; [ $r -eq 0 ] || rc=1
  printf '%-32s rc=%s %6d ms\n' "$name" "$r" $(( ($(date +%s%N) - start) / 1000000 ))
  grep -E '^\[  (FAILED|SKIPPED) |Failure|seed' "$results/$name.log" | head -20
done
python3 "$root/scripts/test_summary.py" "$results" || rc=1
exit $rc
