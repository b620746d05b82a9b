#!/bin/bash
# Device call B: the consumers' K loop three ways (serial, two accumulators, ordered issue like
# cuBLASLt's block kernel), sb loaded two K blocks ahead: tests, every config side by side with
# cuBLASLt / CUTLASS, ncu cycles of the three loops.
R=/tmp/rB; mkdir -p $R; REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf packB.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
TMO=90 t test_gemm_quick env FP8ROUTE_TEST_QUICK=1 $C/bin/test_gemm --gtest_filter='WgmmaBackend.*:GemmBackends.ModelShapesAgainstReference:GemmBackends.ElementAlignedScalesAndBiasRunOnFastBackends:GemmBackends.AllConfigs*'
grep -hE "^\[  (PASSED|FAILED) |FAILED" $R/test_gemm_quick.txt
if ! grep -q "test_gemm_quick rc 0" $R/rc.txt; then cd /tmp && tar czf $OUT/rB.tgz rB; exit 1; fi
B="--model llama-3.1-8b,llama-3.1-70b,deepseek-v3 --tp 1 --m 4096,8192 --catalog shapes/models.json"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 200 > $R/clocks.csv 2>&1 &
SMI=$!
TMO=200 t bench_wgmma $C/bin/gemm_bench $B --scale block --backend wgmma --json $R/wgmma.json
TMO=120 t bench_others $C/bin/gemm_bench $B --scale block --backend cublaslt,cutlass_sm90 --json $R/others.json
TMO=60 t bench_tensor $C/bin/gemm_bench $B --scale tensor --backend cublaslt --json $R/tensor.json
kill $SMI
G="--shapes 8192:8192 --m 8192 --reps 3 --instances 1 --catalog shapes/models.json"
M="--metrics smsp__inst_executed.sum,smsp__cycles_active.avg,smsp__inst_executed_pipe_fma.sum,gpu__time_duration.sum"
for v in 0 1 2; do
  timeout 100 ncu $M --kernel-name-base mangled -k regex:"bfloat16Li128ELi6ELi2ELb1ELNS1_4LoopE${v}E" --launch-skip 2 --launch-count 1 $C/bin/gemm_bench $G --scale block --backend wgmma > $R/ncu_c2_$v.txt 2>&1
  echo "ncu c2 loop $v rc $?" | tee -a $R/rc.txt; grep -E "^\s+(smsp|gpu|sm)__" $R/ncu_c2_$v.txt
done
timeout 100 ncu $M -k regex:nvjet --launch-skip 3 --launch-count 1 $C/bin/gemm_bench $G --scale block --backend cublaslt > $R/ncu_cublaslt.txt 2>&1
echo "ncu cublaslt rc $?"; grep -E "^\s+(smsp|gpu|sm)__" $R/ncu_cublaslt.txt
TMO=300 t tune $C/bin/fp8route tune --model all --tp 1,8 --scale block --m 128,256,512,1024,4096 --backend cublaslt,cutlass_sm90,wgmma --screen 25 --final 5 -o $R/block_tune.json --raw $R/block_tune.raw.jsonl
tail -3 $R/tune.txt; gzip -f $R/block_tune.raw.jsonl
sed "s#\"../bench/results/2026-12-02-wgmma-v2-h200/call15_block_tune.raw.jsonl.gz\"#\"$R/block_tune.raw.jsonl.gz\"#" routes/h200.sources.json > routes/h200.sources.dev.json
TMO=60 t table $C/bin/fp8route table build routes/h200.sources.dev.json -o $R/h200.json; tail -2 $R/table.txt
PYV=$(python3 -c 'import sys;print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
pip install -q --no-index --no-deps --target $C/pylib $C/wheels/*-$PYV-*.whl > $R/pip.txt 2>&1
TMO=120 t python_block env FP8ROUTE_TABLE=$R/h200.json PYTHONPATH=$REPO/python:$C/pylib FP8ROUTE_FFI_LIB=$C/bin/_fp8route_ffi.so python3 bench/python_bench.py --block --model llama-3.1-8b,llama-3.1-70b,deepseek-v3 --m 4096,8192 --json $R/python_block.json
tail -3 $R/python_block.txt
TMO=120 t memcheck compute-sanitizer --tool memcheck $C/bin/test_gemm --gtest_filter='WgmmaBackend.*'
grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt
timeout 60 ncu --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active --kernel-name-base mangled -k regex:"bfloat16Li128ELi6ELi2ELb1ELNS1_4LoopE2E" --launch-skip 2 --launch-count 1 $C/bin/gemm_bench $G --scale block --backend wgmma > $R/ncu_gmma_pct.txt 2>&1; grep -E "^\s+sm__|ERR" $R/ncu_gmma_pct.txt
S="--section SourceCounters --section WarpStateStats --page source --print-source sass --csv"
timeout 120 ncu $S --kernel-name-base mangled -k regex:"bfloat16Li128ELi6ELi2ELb1ELNS1_4LoopE2E" --launch-skip 2 --launch-count 1 $C/bin/gemm_bench $G --scale block --backend wgmma > $R/sass_ord.csv 2>&1
echo "ncu sass rc $?" | tee -a $R/rc.txt
cd /tmp && gzip rB/*.csv rB/*.json rB/h200.json 2>/dev/null; tar czf $OUT/rB.tgz rB
