#!/bin/bash
# Final build: the suites this change touches, then the decode profile and the full e2e comparison.
cd "$(dirname "$0")/../.."
W=$PWD
tar xJf build/carry/pack23.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site build/devpy/apache_tvm_ffi-*.whl 2>&1 | tail -1
export FP8ROUTE_SOURCE_DIR=$W
R=/tmp/r23; mkdir -p $R
snap() { tar czf $OUT/r23.tgz -C /tmp r23; }
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
nvidia-smi > $R/info.txt 2>&1
for s in test_linear_scales test_accum test_attention test_linear test_conventions; do TMO=100 t $s build/gpu/tests/$s; grep -E "^\[  (PASSED|FAILED) |FAILED" $R/$s.txt | head -4; done
TMO=120 t test_gemm build/gpu/tests/test_gemm --gtest_filter='GemmBackends.AllConfigsExactOnSmallIntegers*:DecodeBackend.DependentLaunch*:LinearPlanGpu.*'
grep -E "^\[  (PASSED|FAILED) |FAILED" $R/test_gemm.txt | head -4
T=$W/build/carry/tree
export PYTHONPATH=/tmp/site:$T/python FP8ROUTE_FFI_LIB=$W/build/devpy/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$W/build/gpu/fp8route
cd $T
TMO=150 t pytest_gpu python3 -m pytest -q -p no:cacheprovider tests/python/test_attention_gpu.py tests/python/test_linear_scales_gpu.py tests/python/test_accum.py
tail -3 $R/pytest_gpu.txt; snap
TMO=60 t prof_8b python3 $W/build/carry/profile_step.py --model llama-3.1-8b --batch 1 --out $R/prof_8b
python3 $W/build/carry/incr.py $R/prof_8b.trace.json.gz 9 2 > $R/incr_8b.txt; cat $R/incr_8b.txt
TMO=150 t e2e_full python3 bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8,qwen2.5-72b-tp4 --batches 1,8,32,128 --prefill none --iters 30 --json $R/e2e_full.json
grep -E "decode batch +[0-9]+ fp8route|x torch" $R/e2e_full.txt | head -30
snap
