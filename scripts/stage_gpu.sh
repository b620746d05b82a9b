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
# The Python package: the native module and a tvm-ffi wheel for the GPU machine's Python 3.12 (it has
# no registry); run_tests_direct.sh installs the wheel into build/gpu/pylib there.
if [ -f "$src/python/fp8route/_fp8route_ffi.so" ]; then
  mkdir -p "$dst/python/fp8route"
  cp "$src/python/fp8route/_fp8route_ffi.so" "$dst/python/fp8route/"
  strip "$dst/python/fp8route/_fp8route_ffi.so"
  mkdir -p "$root/build/wheels"
  ls "$root"/build/wheels/apache_tvm_ffi-*cp312*.whl >/dev/null 2>&1 || "$root/build/venv/bin/python" -m pip download -q \
    "apache-tvm-ffi==0.1.15.post2" --python-version 3.12 --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --no-deps -d "$root/build/wheels"
  cp "$root"/build/wheels/apache_tvm_ffi-*cp312*.whl "$dst/python/"
fi
# Symbols are not needed there; stripped, the binaries leave room under the carry limit for the tree.
strip "$dst"/fp8route "$dst"/gemm_bench "$dst"/quant_bench "$dst"/tests/test_*
du -sh "$dst"
