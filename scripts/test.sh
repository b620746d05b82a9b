#!/usr/bin/env bash
# The tests: installs what is missing, builds, runs every suite, then fuzzes the file readers for
# FP8ROUTE_FUZZ_SECONDS each (default 30; 0 skips them) and builds a project against the installed
# package (scripts/consumer_test.sh; FP8ROUTE_CONSUMER_TEST=0 skips it). Without a GPU the GPU tests
# skip with their reason, and the summary counts them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
fuzz="${FP8ROUTE_FUZZ_SECONDS:-30}"
if [ "$fuzz" = 0 ]; then unset FP8ROUTE_FUZZ_SECONDS; else export FP8ROUTE_FUZZ_SECONDS="$fuzz"; fi
export FP8ROUTE_CONSUMER_TEST="${FP8ROUTE_CONSUMER_TEST:-1}"
exec "$root/scripts/run_tests.sh"
