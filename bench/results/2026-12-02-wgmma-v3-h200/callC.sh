#!/bin/bash
# Device call C: the shipped wgmma configs (serial and two-accumulator loops, sb two K blocks ahead):
# the GPU tests the backend and the probe join, and the 28 prefill problems once more.
R=/tmp/rC; mkdir -p $R; REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf packC.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
TMO=120 t test_gemm $C/bin/test_gemm --gtest_filter='WgmmaBackend.*:GemmBackends.ModelShapesAgainstReference:GemmBackends.ElementAlignedScalesAndBiasRunOnFastBackends:GemmBackends.AllConfigs*'
grep -hE "^\[  (PASSED|FAILED) |FAILED" $R/test_gemm.txt
TMO=150 t test_autoprobe $C/bin/test_autoprobe
grep -hE "^\[  (PASSED|FAILED) |FAILED" $R/test_autoprobe.txt
TMO=120 t test_route $C/bin/test_route
grep -hE "^\[  (PASSED|FAILED) |FAILED" $R/test_route.txt
TMO=150 t test_linear $C/bin/test_linear
grep -hE "^\[  (PASSED|FAILED) |FAILED" $R/test_linear.txt
B="--model llama-3.1-8b,llama-3.1-70b,deepseek-v3 --tp 1 --m 4096,8192 --catalog shapes/models.json"
TMO=120 t bench_wgmma $C/bin/gemm_bench $B --scale block --backend wgmma,cublaslt,cutlass_sm90,routed --json $R/bench.json
tail -12 $R/bench_wgmma.txt
cd /tmp && gzip rC/*.json; tar czf $OUT/rC.tgz rC
