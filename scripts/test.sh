#!/usr/bin/env bash
# The tests: installs what is missing, builds, runs every suite. Without a GPU the GPU tests skip
# with their reason, and the summary counts them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
exec "$root/scripts/run_tests.sh"
