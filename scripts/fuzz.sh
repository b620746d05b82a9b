#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang++, AddressSanitizer and UBSan) and runs each for a
# bounded time from the seed corpus fuzz/corpus/<target>; a crash, a leak, undefined behaviour or a
# broken rule (fuzz/fuzz_readers.h) fails it, and its input is kept for the regression test and corpus.
#   scripts/fuzz.sh [--junit report.xml] [target...]     (targets: table grouped_table tune_raw catalog shape_file)
#   FP8ROUTE_FUZZ_SECONDS  seconds per target (default 30; long runs: FP8ROUTE_FUZZ_SECONDS=600)
#   FP8ROUTE_FUZZ_JOBS     targets run at once (default 1; each keeps one core busy)
#   FP8ROUTE_FUZZ_BUILD    build folder (default build/fuzz); crashing inputs go to its artifacts/
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FP8ROUTE_FUZZ_BUILD:-$root/build/fuzz}"
seconds="${FP8ROUTE_FUZZ_SECONDS:-30}"
jobs_max="${FP8ROUTE_FUZZ_JOBS:-1}"
[[ "$jobs_max" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: FP8ROUTE_FUZZ_JOBS takes a count >= 1, got '$jobs_max'" >&2; exit 2; }
junit=""
if [ "${1:-}" = "--junit" ]; then junit="$2"; shift 2; fi
targets=("$@"); ((${#targets[@]})) || targets=(table grouped_table tune_raw catalog shape_file)

log="$build/build.log"
mkdir -p "$build"
if ! { cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="${FP8ROUTE_FUZZ_CXX:-clang++}" \
         && cmake --build "$build"; } >"$log" 2>&1; then
  tail -30 "$log"
  echo "fuzz: the targets did not build (clang++ with libFuzzer: scripts/setup.sh installs clang and libclang-rt-14-dev)" >&2
  built=0
else
  built=1
fi

# The targets hand each input to the readers as a file: in memory when /dev/shm is there (twice the
# runs per second of a disk).
scratch_root=/tmp; [ -d /dev/shm ] && [ -w /dev/shm ] && scratch_root=/dev/shm
scratch=$(mktemp -d "$scratch_root/fp8route-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# One target: its line of the report in $build/$t.result, its JUnit case in $build/$t.case.
fuzz_one() {
  local t="$1" work art start r took runs
  # New inputs go to a scratch corpus; the repository's seeds are only read.
  work="$build/corpus/$t"; art="$build/artifacts/$t"
  mkdir -p "$work" "$art"
  start=$(date +%s)
  if ((built)); then
    TMPDIR="$scratch" "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -dict="$root/fuzz/json.dict" \
      -artifact_prefix="$art/" -print_final_stats=1 "$work" "$root/fuzz/corpus/$t" >"$build/$t.log" 2>&1
    r=$?
  else
    r=1; echo "not built" >"$build/$t.log"
  fi
  took=$(($(date +%s) - start))
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/$t.log" | grep -o '[0-9]*$' || true)
  if [ $r -eq 0 ]; then
    printf 'fuzz %-10s ok      %4d s, %s runs\n' "$t" "$took" "${runs:-?}" >"$build/$t.result"
    echo "<testcase classname=\"fuzz\" name=\"$t\" time=\"$took\"/>" >"$build/$t.case"
  else
    printf 'fuzz %-10s FAILED  %4d s (rc %d): inputs in %s, log %s\n' "$t" "$took" "$r" "$art" "$build/$t.log" >"$build/$t.result"
    grep -E 'ERROR|runtime error|Broken|terminate|SUMMARY|Test unit written' "$build/$t.log" | head -8 >>"$build/$t.result"
    echo "<testcase classname=\"fuzz\" name=\"$t\" time=\"$took\"><failure message=\"rc $r: see $build/$t.log\"/></testcase>" >"$build/$t.case"
  fi
  return $r
}

# FP8ROUTE_FUZZ_JOBS targets at a time; the reports in the targets' order.
for t in "${targets[@]}"; do
  rm -f "$build/$t.result" "$build/$t.case"
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n; done
  fuzz_one "$t" &
done
wait
rc=0
cases=""
for t in "${targets[@]}"; do
  if [ -f "$build/$t.result" ]; then cat "$build/$t.result"; else printf 'fuzz %-10s FAILED  (no report)\n' "$t"; rc=1; fi
  grep -q '^fuzz [^ ]* *ok ' "$build/$t.result" 2>/dev/null || rc=1
  cases+="$(cat "$build/$t.case" 2>/dev/null || echo "<testcase classname=\"fuzz\" name=\"$t\"><failure message=\"no report\"/></testcase>")"
done
if [ -n "$junit" ]; then
  mkdir -p "$(dirname "$junit")"
  echo "<?xml version=\"1.0\"?><testsuite name=\"fuzz\">$cases</testsuite>" >"$junit"
fi
exit $rc
