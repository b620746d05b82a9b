#!/bin/bash
# Device call 14: the wgmma block-scaled kernel with its K loop's invariants kept in registers
# (shared-space sa loads, descriptors and barrier addresses computed once): the GPU tests it joins,
# then old (a0b2b06) and new side by side, interleaved, and the instruction counts.
R=/tmp/r14; mkdir -p $R; REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf pack14.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
TMO=200 t test_gemm_quick env FP8ROUTE_TEST_QUICK=1 $C/bin/test_gemm --gtest_filter='WgmmaBackend.*:GemmBackends.ModelShapesAgainstReference:GemmBackends.ElementAlignedScalesAndBiasRunOnFastBackends:GemmBackends.AllConfigs*'
grep -hE "^\[  (PASSED|FAILED) |FAILED" $R/test_gemm_quick.txt
B="--model llama-3.1-8b,llama-3.1-70b,deepseek-v3 --tp 1 --m 4096,8192 --scale block --catalog shapes/models.json"
for i in 1 2; do
  TMO=120 t bench_new$i $C/bin/gemm_bench $B --backend wgmma
  TMO=120 t bench_old$i $C/bin/gemm_bench_old $B --backend wgmma
done
TMO=120 t bench_others $C/bin/gemm_bench $B --backend cublaslt,cutlass_sm90
M="--metrics smsp__inst_executed.sum,smsp__cycles_active.avg,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_uniform.sum,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"
G="--shapes 8192:8192 --m 8192 --reps 3 --instances 1 --scale block --backend wgmma --catalog shapes/models.json"
for v in new old; do b=$C/bin/gemm_bench; [ $v = old ] && b=$C/bin/gemm_bench_old
  timeout 100 ncu $M -k regex:sm90_fp8_gemm_block --launch-skip 2 --launch-count 1 $b $G > $R/ncu_$v.txt 2>&1
  echo "== $v"; grep -E "^\s+smsp__" $R/ncu_$v.txt
done
cd /tmp && tar czf $OUT/r14.tgz r14
