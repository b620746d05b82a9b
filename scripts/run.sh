#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs `fp8route` (arguments pass through).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" >/dev/null
exec "$root/build/${FP8ROUTE_PRESET:-release}/fp8route" "$@"
