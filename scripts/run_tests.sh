#!/usr/bin/env bash
# Runs the already-built test suites (ctest) and totals them, skips and their reasons included.
# Needs nothing but the build tree, so it also runs on the GPU machine, which has no registries.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/${FP8ROUTE_PRESET:-release}"
rm -rf "$build/test-results"
(cd "$build" && ctest --output-on-failure "$@")
rc=$?
python3 "$root/scripts/test_summary.py" "$build/test-results" || rc=1
exit $rc
