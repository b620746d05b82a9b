#!/usr/bin/env bash
# Runs the already-built test suites (ctest) and totals them, skips and their reasons included.
# Needs nothing but the build tree, so it also runs on the GPU machine, which has no registries.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/${FP8ROUTE_PRESET:-release}"
# FP8ROUTE_TEST_JOBS > 1 (scripts/test.sh sets it on a machine without a GPU): ctest runs that many
# suites at once (those that may use a GPU one at a time: tests/CMakeLists.txt) and the Python tests
# run beside them, their output shown after ctest's.
jobs="${FP8ROUTE_TEST_JOBS:-1}"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "run_tests: FP8ROUTE_TEST_JOBS takes a count >= 1, got '$jobs'" >&2; exit 2; }
rm -rf "$build/test-results"
# The Python package's tests (tests/python), when its native module was built (tvm_ffi in the venv).
venv="${FP8ROUTE_VENV:-$root/build/venv}"
python_tests() {
  FP8ROUTE_FFI_LIB="$build/python/fp8route/_fp8route_ffi.so" FP8ROUTE_SOURCE_DIR="$root" FP8ROUTE_CLI="$build/fp8route" \
    "$venv/bin/python" -m pytest -q -rs "$root/tests/python" --junitxml="$build/test-results/python.xml"
}
have_python=0
[ -f "$build/python/fp8route/_fp8route_ffi.so" ] && [ -x "$venv/bin/python" ] && have_python=1
python_pid=""
if ((have_python && jobs > 1)); then
  python_tests >"$build/python-tests.log" 2>&1 &
  python_pid=$!
fi
(cd "$build" && ctest --output-on-failure -j "$jobs" "$@")
rc=$?
if ((have_python)); then
  if [ -n "$python_pid" ]; then
    wait "$python_pid" || rc=1
    cat "$build/python-tests.log"
  else
    python_tests || rc=1
  fi
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
