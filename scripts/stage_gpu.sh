#!/usr/bin/env bash
# Copies the built binaries (tool, benchmarks, test suites) of build/release into build/gpu, small
# enough to carry to the GPU machine (the whole build tree, CUTLASS objects included, is not).
# There: FP8ROUTE_PRESET=gpu scripts/gpu_check.sh (or scripts/run_tests_direct.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/build/${FP8ROUTE_PRESET:-release}"
dst="$root/build/gpu"
rm -rf "$dst"
mkdir -p "$dst/tests"
cp "$src"/tests/test_* "$dst/tests/"
rm -f "$dst"/tests/*.xml
for b in fp8route gemm_bench quant_bench; do cp "$src/$b" "$dst/"; done
# Symbols are not needed there; stripped, the binaries leave room under the carry limit for the tree.
strip "$dst"/fp8route "$dst"/gemm_bench "$dst"/quant_bench "$dst"/tests/test_*
du -sh "$dst"
