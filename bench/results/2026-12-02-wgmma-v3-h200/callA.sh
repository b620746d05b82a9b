#!/bin/bash
# Device call A: the two-accumulator (overlapped promotion) wgmma configs: tests, SASS check,
# every config side by side with cuBLASLt / CUTLASS (block) and cuBLASLt per-tensor, clocks, and
# ncu per-instruction profiles of cuBLASLt's block kernel and ours.
R=/tmp/rA; mkdir -p $R; REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf packA.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
nvidia-smi > $R/smi.txt 2>&1
TMO=150 t test_gemm_quick env FP8ROUTE_TEST_QUICK=1 $C/bin/test_gemm --gtest_filter='WgmmaBackend.*:GemmBackends.ModelShapesAgainstReference:GemmBackends.ElementAlignedScalesAndBiasRunOnFastBackends:GemmBackends.AllConfigs*'
grep -hE "^\[  (PASSED|FAILED) |FAILED" $R/test_gemm_quick.txt
/usr/local/cuda/bin/cuobjdump -sass -fun '_ZN8fp8route7kernels5wgmma19sm90_fp8_gemm_blockI13__nv_bfloat16Li128ELi6ELi2ELb1ELb1EEEv14CUtensorMap_stS4_S4_S4_NS1_6ParamsE' $C/bin/gemm_bench > $R/sass_acc2.txt 2>&1
grep -cE "QGMMA|DEPBAR" $R/sass_acc2.txt; grep -E "QGMMA|DEPBAR|WARPGROUP" $R/sass_acc2.txt | head -60
B="--model llama-3.1-8b,llama-3.1-70b,deepseek-v3 --tp 1 --m 4096,8192 --catalog shapes/models.json"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 200 > $R/clocks.csv 2>&1 &
SMI=$!
TMO=200 t bench_wgmma $C/bin/gemm_bench $B --scale block --backend wgmma --json $R/wgmma.json
TMO=120 t bench_others $C/bin/gemm_bench $B --scale block --backend cublaslt,cutlass_sm90 --json $R/others.json
TMO=60 t bench_tensor $C/bin/gemm_bench $B --scale tensor --backend cublaslt --json $R/tensor.json
kill $SMI
G="--shapes 8192:8192 --m 8192 --reps 3 --instances 1 --catalog shapes/models.json"
S="--section SourceCounters --section WarpStateStats --page source --print-source sass --csv"
timeout 120 ncu $S -k 'regex:nvjet' --launch-skip 3 --launch-count 1 $C/bin/gemm_bench $G --scale block --backend cublaslt > $R/sass_cublaslt_block.csv 2>&1
echo "ncu cublaslt rc $?" | tee -a $R/rc.txt
M="--metrics smsp__inst_executed.sum,smsp__cycles_active.avg,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_uniform.sum,gpu__time_duration.sum"
PYV=$(python3 -c 'import sys;print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
pip install -q --no-index --no-deps --target $C/pylib $C/wheels/*-$PYV-*.whl > $R/pip.txt 2>&1
TMO=150 t python_block env PYTHONPATH=$REPO/python:$C/pylib FP8ROUTE_FFI_LIB=$C/bin/_fp8route_ffi.so python3 bench/python_bench.py --block --model llama-3.1-8b,llama-3.1-70b,deepseek-v3 --m 4096,8192 --json $R/python_block.json
tail -4 $R/python_block.txt
for v in Li128ELi6ELi2ELb1ELb0E Li128ELi6ELi2ELb1ELb1E; do
  timeout 100 ncu $M --kernel-name-base mangled -k regex:"bfloat16$v" --launch-skip 2 --launch-count 1 $C/bin/gemm_bench $G --scale block --backend wgmma > $R/ncu_$v.txt 2>&1
  echo "ncu $v rc $?" | tee -a $R/rc.txt; grep -E "^\s+(smsp|gpu)__|Profiling" $R/ncu_$v.txt
done
timeout 120 ncu $S --kernel-name-base mangled -k regex:bfloat16Li128ELi6ELi2ELb1ELb1E --launch-skip 2 --launch-count 1 $C/bin/gemm_bench $G --scale block --backend wgmma > $R/sass_wgmma_acc2.csv 2>&1
echo "ncu wgmma sass rc $?" | tee -a $R/rc.txt
cd /tmp && gzip rA/*.csv rA/*.json; tar czf $OUT/rA.tgz rA
