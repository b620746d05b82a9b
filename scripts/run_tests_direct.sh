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
# The Python package (staged by stage_gpu.sh): tvm-ffi from the carried wheel, then pytest.
if [ -f "$build/python/fp8route/_fp8route_ffi.so" ]; then
  python3 -c "import tvm_ffi" 2>/dev/null || python3 -m pip install -q --no-index --no-deps \
    --target "$build/pylib" "$build"/python/apache_tvm_ffi-*.whl
  PYTHONPATH="$build/pylib${PYTHONPATH:+:$PYTHONPATH}" FP8ROUTE_FFI_LIB="$build/python/fp8route/_fp8route_ffi.so" FP8ROUTE_CLI="$build/fp8route" \
    python3 -m pytest -q -rs "$root/tests/python" --junitxml="$results/python.xml" > "$results/python.log" 2>&1
  r=$?; [ $r -eq 0 ] || rc=1
  printf '%-32s rc=%s\n' "python (pytest)" "$r"
  tail -15 "$results/python.log"
fi
python3 "$root/scripts/test_summary.py" "$results" || rc=1
exit $rc
