#!/usr/bin/env bash
# Runs the already-built test suites (ctest) and totals them, skips and their reasons included.
# Needs nothing but the build tree, so it also runs on the GPU machine, which has no registries.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/${FP8ROUTE_PRESET:-release}"
rm -rf "$build/test-results"
(cd "$build" && ctest --output-on-failure "$@")
rc=$?
# The Python package's tests (tests/python), when its native module was built (tvm_ffi in the venv).
venv="${FP8ROUTE_VENV:-$root/build/venv}"
if [ -f "$build/python/fp8route/_fp8route_ffi.so" ] && [ -x "$venv/bin/python" ]; then
  FP8ROUTE_FFI_LIB="$build/python/fp8route/_fp8route_ffi.so" FP8ROUTE_SOURCE_DIR="$root" FP8ROUTE_CLI="$build/fp8route" \
    "$venv/bin/python" -m pytest -q -rs "$root/tests/python" --junitxml="$build/test-results/python.xml" || rc=1
else
  echo "python tests: not run (no native module in $build/python/fp8route: tvm_ffi missing from the venv)"
fi
# The file readers' fuzz targets (fuzz/, clang with libFuzzer), FP8ROUTE_FUZZ_SECONDS each, when set
# (scripts/test.sh sets it; their JUnit report joins the summary).
if [ -n "${FP8ROUTE_FUZZ_SECONDS:-}" ]; then
  bash "$root/scripts/fuzz.sh" --junit "$build/test-results/fuzz.xml" || rc=1
fi
# The installed package built into a project outside the tree (scripts/consumer_test.sh), when
# FP8ROUTE_CONSUMER_TEST is 1 (scripts/test.sh sets it: it needs cmake and a compiler, which running
# the built suites alone does not).
if [ "${FP8ROUTE_CONSUMER_TEST:-0}" = 1 ]; then
  bash "$root/scripts/consumer_test.sh" --junit "$build/test-results/consumer.xml" "$build" || rc=1
fi
python3 "$root/scripts/test_summary.py" "$build/test-results" || rc=1
exit $rc
