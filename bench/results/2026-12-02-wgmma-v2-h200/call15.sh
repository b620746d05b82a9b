#!/bin/bash
# Device call 15: the block-scale tune with the trimmed wgmma kernel (the table's block group), and
# memcheck of the backend's edge test.
R=/tmp/r15; mkdir -p $R; REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf pack15.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
TMO=240 t tune $C/bin/fp8route tune --model all --tp 1,8 --scale block --m 128,256,512,1024,4096 --backend cublaslt,cutlass_sm90,wgmma --screen 25 --final 5 -o $R/block_tune.json --raw $R/block_tune.raw.jsonl
tail -3 $R/tune.txt
TMO=120 t memcheck compute-sanitizer --tool memcheck $C/bin/test_gemm --gtest_filter='WgmmaBackend.*'
grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt
gzip -f $R/block_tune.raw.jsonl
cd /tmp && tar czf $OUT/r15.tgz r15
