#!/bin/bash
# Planned device call (about 5 minutes, at most 420 s): DeepGEMM's grouped masked and contiguous
# kernels (a5645d7, JIT-compiled here) beside fp8route's grouped backends on DeepSeek-V3's EP-8 expert
# shapes (dg_grouped.py). Carry .stage/moe.tar.xz (call1.sh's archive) and .stage/dg.tar.xz, made on the
# CPU machine from the DeepGEMM mirror:
#   git archive a5645d7 deep_gemm tests | tar x -C D; cp -r <venv>/cutlass_library/source/include/{cute,cutlass}
#   D/deep_gemm/include/; in D/deep_gemm/jit/compiler.py '-std=c++20' and
#   '-DPFN_cuTensorMapEncodeTiled=PFN_cuTensorMapEncodeTiled_v12000' for '-std=c++17', without '-fconcepts';
#   tar cf - -C D deep_gemm tests | xz > .stage/dg.tar.xz
# The DeepGEMM source is an outside reference and stays out of the repository.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/dgg B=$PWD/build/gpu
mkdir -p $R /tmp/site /tmp/dg
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
tar xJf .stage/dg.tar.xz -C /tmp/dg
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/dg:/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so DG_CACHE_DIR=/tmp/dgcache DG_NVCC_COMPILER=/usr/local/cuda/bin/nvcc
{ nvidia-smi --query-gpu=name,driver_version --format=csv; /usr/local/cuda/bin/nvcc --version; } > $R/env.txt 2>&1
s=$(date +%s)
DG_JSON=$R/dg_grouped.json timeout ${DG_TIMEOUT:-420} python3 bench/results/2026-12-05-moe-next/dg_grouped.py --precompile \
  > $R/dg_grouped.txt 2>&1
echo "dg_grouped rc $? $(( $(date +%s) - s )) s" | tee $R/rc.txt
grep -v "^compiled" $R/dg_grouped.txt | tail -60
tar czf $OUT/dgg.tgz -C /tmp dgg
