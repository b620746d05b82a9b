#!/bin/bash
# Device call D: DeepGEMM (a5645d7, JIT-compiled here) against fp8route and torch, block scales,
# the 28 prefill problems (dg_compare.py). build/carry/dg.tar.xz: `git archive a5645d7 deep_gemm tests`
# of github.com/deepseek-ai/DeepGEMM, the nvidia-cutlass headers (cute/, cutlass/) copied into
# deep_gemm/include, and in deep_gemm/jit/compiler.py '-std=c++20' and
# '-DPFN_cuTensorMapEncodeTiled=PFN_cuTensorMapEncodeTiled_v12000' for '-std=c++17', without '-fconcepts'.
R=/tmp/rD; mkdir -p $R; REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf packD.tar.xz && tar xf dg.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO DG_CACHE_DIR=/tmp/dgcache DG_NVCC_COMPILER=/usr/local/cuda/bin/nvcc
PYV=$(python3 -c 'import sys;print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
pip install -q --no-index --no-deps --target $C/pylib $C/wheels/*-$PYV-*.whl > $R/pip.txt 2>&1
/usr/local/cuda/bin/nvcc --version > $R/nvcc.txt 2>&1
s=$(date +%s)
PYTHONPATH=$C:$REPO/python:$C/pylib FP8ROUTE_FFI_LIB=$C/bin/_fp8route_ffi.so DG_JSON=$R/dg_compare.json timeout 380 python3 bench/results/2026-12-02-wgmma-v3-h200/dg_compare.py --precompile > $R/dg_compare.txt 2>&1
echo "dg rc $? $(( $(date +%s) - s )) s" | tee $R/rc.txt
grep -v "^compiled" $R/dg_compare.txt | tail -40
cd /tmp && tar czf $OUT/rD.tgz rD
