#!/usr/bin/env bash
# The host code under ThreadSanitizer (docs/design.md, "Sanitizers"). scripts/test.sh runs the same
# suites through ctest in its own build (ctest -L tsan); this builds and runs them on their own:
# the suites compiled with -fsanitize=thread, linked with a second, instrumented compile of the
# library's .cpp files and with the library's own CUDA objects, uninstrumented (cmake/tsan.cmake,
# tests/tsan/<suite>; no CUDA file compiles twice), then checks the set-up itself: no atomic in the
# CUDA objects' host code (cmake/tsan_cuda_check.cmake) and a deliberate race reported and failed.
# A race report, a failed test, a crash or a failed check fails. No GPU needed (the GPU is hidden from
# these suites: their GPU tests skip).
#   scripts/tsan.sh [--full] [suite...]   (default: the build's FP8ROUTE_TSAN_SUITES, test_threads and
#                                          test_autoprobe; any suite of tests/CMakeLists.txt may be named)
#   --full   a whole build with FP8ROUTE_SANITIZE=thread instead: the host side of the .cu files
#            instrumented too, and with a GPU the suites' GPU tests run, instrumented on the host side
#            (every CUDA file compiles again: ~4 GB per nvcc process)
#   FP8ROUTE_TSAN_BUILD   build folder (default build/tsan; --full: build/tsan-full). Without CUTLASS,
#                         benchmarks, tool and Python module when this configures it.
#   FP8ROUTE_TSAN_JOBS    compile jobs (default 1: the library's CUDA files take ~4 GB each)
#   TSAN_OPTIONS          passed on (halt_on_error=0 second_deadlock_stack=1 unless set)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
full=0
if [ "${1:-}" = "--full" ]; then full=1; shift; fi
suites=("$@")
if ((full)); then build="${FP8ROUTE_TSAN_BUILD:-$root/build/tsan-full}"; else build="${FP8ROUTE_TSAN_BUILD:-$root/build/tsan}"; fi
jobs="${FP8ROUTE_TSAN_JOBS:-1}"
export PATH="/usr/local/cuda/bin:$PATH"

mkdir -p "$build" && build="$(cd "$build" && pwd)"
args=()
if [ ! -f "$build/CMakeCache.txt" ]; then
  args+=(-G Ninja -DFP8ROUTE_WITH_CUTLASS=OFF -DFP8ROUTE_BUILD_BENCH=OFF -DFP8ROUTE_BUILD_PYTHON=OFF
         -DFP8ROUTE_BUILD_TOOLS=OFF)
  if ((full)); then args+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo); else args+=(-DCMAKE_BUILD_TYPE=Release); fi
fi
if ((full)); then
  args+=(-DFP8ROUTE_SANITIZE=thread)
  ((${#suites[@]})) || suites=(test_threads test_autoprobe test_route_log test_table_load)
else
  args+=(-DFP8ROUTE_SANITIZE= -DFP8ROUTE_TSAN_TESTS=ON)
  if ((${#suites[@]})); then args+=("-DFP8ROUTE_TSAN_SUITES=$(IFS=';'; echo "${suites[*]}")"); fi
fi
cmake -S "$root" -B "$build" "${args[@]}" >"$build/configure.log" 2>&1 ||
  { tail -20 "$build/configure.log"; echo "tsan: configure failed (log $build/configure.log)" >&2; exit 1; }
if ((full)); then
  bin="$build/tests"
  targets=("${suites[@]}")
else
  grep -q '^FP8ROUTE_HAVE_TSAN:INTERNAL=1' "$build/CMakeCache.txt" ||
    { grep -A3 -i 'sanitize=thread' "$build/configure.log"; echo "tsan: this compiler cannot build with -fsanitize=thread" >&2; exit 1; }
  if ! ((${#suites[@]})); then
    IFS=';' read -r -a suites <<<"$(sed -n 's/^FP8ROUTE_TSAN_SUITES:STRING=//p' "$build/CMakeCache.txt")"
  fi
  bin="$build/tests/tsan"
  targets=(fp8route_cuda_part)
  for s in "${suites[@]}"; do targets+=("tsan_$s"); done
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}" || { echo "tsan: build failed" >&2; exit 1; }

export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=0 second_deadlock_stack=1}"
export FP8ROUTE_SOURCE_DIR="${FP8ROUTE_SOURCE_DIR:-$root}"
rc=0
for s in "${suites[@]}"; do
  log="$build/$s.tsan.log"
  start=$(date +%s)
  if ((full)); then
    "$bin/$s" --gtest_brief=1 >"$log" 2>&1
  else
    CUDA_VISIBLE_DEVICES='' "$bin/$s" --gtest_brief=1 >"$log" 2>&1
  fi
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
if ! ((full)); then
  # The set-up: tsan_cuda_host_sync, and tsan_catches_a_race where test_threads is among the suites.
  if (cd "$build" && ctest -R '^tsan_(cuda_host_sync|catches_a_race)$' --output-on-failure >"$build/setup-checks.log" 2>&1); then
    printf 'tsan set-up checks   ok      (%s)\n' "$(grep -oE 'tsan_[a-z_]+ \.+ +Passed' "$build/setup-checks.log" | cut -d' ' -f1 | paste -sd' ')"
  else
    rc=1
    echo "tsan set-up checks   FAILED  (log $build/setup-checks.log)"
    grep -E 'Test +#[0-9]+: ' "$build/setup-checks.log"
  fi
fi
exit $rc
