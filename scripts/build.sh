#!/usr/bin/env bash
# Configures and builds fp8route (preset "release" unless FP8ROUTE_PRESET says otherwise).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
preset="${FP8ROUTE_PRESET:-release}"
cd "$root"
export PATH="/usr/local/cuda/bin:$PATH"
[ -f "build/$preset/CMakeCache.txt" ] || cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
