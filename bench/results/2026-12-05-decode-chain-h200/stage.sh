#!/bin/bash
# On the CPU machine, before the device calls (CPU time only; about 30-40 minutes at -j2, CUTLASS
# units dominating): the release build of this branch (trace off: the suites, the module); the
# Python module alone with FP8ROUTE_CHAIN_TRACE=ON (CUTLASS off: batch-1 decode routes to the
# decode and skinny backends; the bench prints the routes it ran); the module of the branch point
# a42bda2 with its Python package, for the e2e A/B. All staged into build/gpu (under the carry limit).
# FP8ROUTE_PYTHON: a Python with tvm_ffi (scripts/setup.sh makes build/venv).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${FP8ROUTE_PYTHON:-/work/main/build/venv/bin/python}
COMMON=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc
        -DFP8ROUTE_CUTLASS_CONFIGS_PER_UNIT=3 -DFP8ROUTE_BUILD_TESTS=OFF -DFP8ROUTE_BUILD_TOOLS=OFF
        -DFP8ROUTE_BUILD_BENCH=OFF -DFP8ROUTE_PYTHON="$PY")
export PATH=/usr/local/cuda/bin:$PATH
[ -f build/release/CMakeCache.txt ] || cmake --preset release -DFP8ROUTE_PYTHON="$PY"
cmake --build --preset release
[ -f build/trace/CMakeCache.txt ] || cmake -S . -B build/trace "${COMMON[@]}" -DFP8ROUTE_CHAIN_TRACE=ON \
  -DFP8ROUTE_WITH_CUTLASS=OFF
cmake --build build/trace -j2 --target fp8route_ffi
[ -d build/base-src ] || git worktree add --detach build/base-src a42bda2
[ -f build/base/CMakeCache.txt ] || cmake -S build/base-src -B build/base "${COMMON[@]}"
cmake --build build/base -j2 --target fp8route_ffi
FP8ROUTE_STAGE="tests python" FP8ROUTE_STAGE_TESTS="test_norm test_attention test_gemm" scripts/stage_gpu.sh
mkdir -p build/gpu/trace build/gpu/base
cp build/trace/python/fp8route/_fp8route_ffi.so build/gpu/trace/ && strip build/gpu/trace/_fp8route_ffi.so
cp build/base/python/fp8route/_fp8route_ffi.so build/gpu/base/ && strip build/gpu/base/_fp8route_ffi.so
git archive a42bda2 python bench/e2e.py | tar -x -C build/gpu/base
du -sh build/gpu
