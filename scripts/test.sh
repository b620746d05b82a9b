#!/usr/bin/env bash
# The tests: installs what is missing, builds, runs every suite, then fuzzes the file readers for
# FP8ROUTE_FUZZ_SECONDS each (default 15, one target per core; 0 skips them; scripts/fuzz.sh for long
# runs) and builds a project against the installed package (scripts/consumer_test.sh;
# FP8ROUTE_CONSUMER_TEST=0 skips it). Without a GPU the GPU tests skip with their reason, and the
# summary counts them; the suites, all CPU-bound then, run side by side with the Python tests
# (FP8ROUTE_TEST_JOBS, default one per core there, 1 with a GPU).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
# ThreadSanitizer: its suites (ctest tsan_*, tests/CMakeLists.txt) are built above and run with the
# others. Where the compiler cannot link -fsanitize=thread, configure leaves them out with a warning;
# here that fails, unless they were turned off on purpose (-DFP8ROUTE_TSAN_TESTS=OFF).
if ! grep -qE '^FP8ROUTE_HAVE_TSAN:INTERNAL=1|^FP8ROUTE_TSAN_TESTS:BOOL=OFF' \
     "$root/build/${FP8ROUTE_PRESET:-release}/CMakeCache.txt"; then
  echo "test.sh: no ThreadSanitizer suites in this build: the compiler cannot link -fsanitize=thread" \
       "(GCC: install libtsan2), or configure with -DFP8ROUTE_TSAN_TESTS=OFF to go without" >&2
  exit 1
fi
cores=$(nproc 2>/dev/null || echo 1)
fuzz="${FP8ROUTE_FUZZ_SECONDS:-15}"
if [ "$fuzz" = 0 ]; then unset FP8ROUTE_FUZZ_SECONDS; else export FP8ROUTE_FUZZ_SECONDS="$fuzz"; fi
export FP8ROUTE_FUZZ_JOBS="${FP8ROUTE_FUZZ_JOBS:-$cores}"
if compgen -G '/dev/nvidia[0-9]*' >/dev/null; then jobs=1; else jobs=$cores; fi
export FP8ROUTE_TEST_JOBS="${FP8ROUTE_TEST_JOBS:-$jobs}"
export FP8ROUTE_CONSUMER_TEST="${FP8ROUTE_CONSUMER_TEST:-1}"
exec "$root/scripts/run_tests.sh"
