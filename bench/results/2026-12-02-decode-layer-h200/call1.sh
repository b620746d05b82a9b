#!/bin/bash
# Call A: tests of the skinny PDL + fused attention quant, then old/new decode profiles and e2e.
cd "$(dirname "$0")/../.."
tar xJf build/carry/pack20.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site build/devpy/apache_tvm_ffi-*.whl 2>&1 | tail -1
NEW="PYTHONPATH=/tmp/site:$PWD/build/carry/tree/python FP8ROUTE_FFI_LIB=$PWD/build/devpy/fp8route/_fp8route_ffi.so"
OLD="PYTHONPATH=/tmp/site:$PWD/build/carry/pyold/python FP8ROUTE_FFI_LIB=$PWD/build/oldso/_fp8route_ffi.so"
export FP8ROUTE_SOURCE_DIR=$PWD
R=/tmp/r20; mkdir -p $R
snap() { tar czf $OUT/r20.tgz -C /tmp r20; }
nvidia-smi > $R/info.txt 2>&1; git log -1 --format=%H > $R/commit.txt 2>/dev/null
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
for s in test_attention test_quant test_norm test_linear; do TMO=150 t $s build/gpu/tests/$s; grep -E "^\[  (PASSED|FAILED) |FAILED" $R/$s.txt | head -6; done
TMO=200 t test_gemm build/gpu/tests/test_gemm --gtest_filter='GemmBackends.AllConfigsExactOnSmallIntegers*:DecodeBackend.DependentLaunch*:LinearPlanGpu.*:Skinny*:*Skinny*'
grep -E "^\[  (PASSED|FAILED) |FAILED" $R/test_gemm.txt | head -6
TMO=240 t pytest_gpu env $NEW python3 -m pytest -q -x -p no:cacheprovider build/carry/tree/tests/python/test_attention_gpu.py build/carry/tree/tests/python/test_models.py build/carry/tree/tests/python/test_torch_gpu.py
tail -4 $R/pytest_gpu.txt; snap
for m in llama-3.1-8b llama-3.1-70b-tp8; do
  for v in old new; do
    if [ $v = old ]; then E="$OLD"; P=9; else E="$NEW"; P=8; fi
    TMO=100 t prof_${m}_$v env $E python3 build/carry/profile_step.py --model $m --batch 1 --out $R/prof_${m}_$v
    python3 build/carry/incr.py $R/prof_${m}_$v.trace.json.gz $P 2 > $R/incr_${m}_$v.txt; echo "$m $v"; cat $R/incr_${m}_$v.txt
  done
done
snap
for v in old new; do
  if [ $v = old ]; then E="$OLD"; else E="$NEW"; fi
  TMO=200 t e2e_$v env $E python3 bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8,qwen2.5-72b-tp4 --variants fp8route --batches 1,8,32,128 --prefill none --iters 30 --json $R/e2e_$v.json
  grep -E "decode" $R/e2e_$v.txt | head -20
done
snap
