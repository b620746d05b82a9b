#!/usr/bin/env bash
# The host code under ThreadSanitizer: configures a build with FP8ROUTE_SANITIZE=thread (the CUTLASS
# backend, the benchmarks and the Python module off: host code is what is checked), builds the suites
# that share host state between threads and runs them; a race report, a failed test or a crash fails.
# No GPU needed (with one, those suites' GPU tests run too, instrumented on the host side).
#   scripts/tsan.sh [suite...]   (default: test_threads test_autoprobe test_route_log test_table_load)
#   FP8ROUTE_TSAN_BUILD   build folder (default build/tsan)
#   FP8ROUTE_TSAN_JOBS    compile jobs (default 1: the library's CUDA files take ~4 GB each)
#   TSAN_OPTIONS          passed on (halt_on_error=0 second_deadlock_stack=1 unless set)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FP8ROUTE_TSAN_BUILD:-$root/build/tsan}"
jobs="${FP8ROUTE_TSAN_JOBS:-1}"
suites=("$@"); ((${#suites[@]})) || suites=(test_threads test_autoprobe test_route_log test_table_load)
export PATH="/usr/local/cuda/bin:$PATH"

mkdir -p "$build"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8ROUTE_SANITIZE=thread \
    -DFP8ROUTE_WITH_CUTLASS=OFF -DFP8ROUTE_BUILD_BENCH=OFF -DFP8ROUTE_BUILD_PYTHON=OFF >"$build/configure.log" 2>&1 ||
    { tail -20 "$build/configure.log"; echo "tsan: configure failed (log $build/configure.log)" >&2; exit 1; }
fi
cmake --build "$build" -j "$jobs" --target "${suites[@]}" || { echo "tsan: build failed" >&2; exit 1; }

export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=0 second_deadlock_stack=1}"
export FP8ROUTE_SOURCE_DIR="${FP8ROUTE_SOURCE_DIR:-$root}"
rc=0
for s in "${suites[@]}"; do
  log="$build/$s.tsan.log"
  start=$(date +%s)
  "$build/tests/$s" --gtest_brief=1 >"$log" 2>&1
  r=$?
  took=$(($(date +%s) - start))
  races=$(grep -c '^WARNING: ThreadSanitizer:' "$log")
  passed=$(grep -aoE '^\[  PASSED  \] [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  if [ "$r" = 0 ] && [ "$races" = 0 ]; then
    printf 'tsan %-16s ok      %4d s, %s tests passed\n' "$s" "$took" "${passed:-?}"
  else
    rc=1
    printf 'tsan %-16s FAILED  %4d s (rc %d, %d race reports), log %s\n' "$s" "$took" "$r" "$races" "$log"
    grep -aE '^WARNING: ThreadSanitizer:|^SUMMARY: ThreadSanitizer:|^\[  FAILED  \]' "$log" | sort | uniq -c | head -10
  fi
done
exit $rc
