#!/bin/bash
set -u
cd "$(dirname "$0")/.."
W=$PWD R=/tmp/tune2 B=$PWD/build/gpu
mkdir -p $R /tmp/site build && tar xJf .stage/gpu2.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/tune2.tgz -C /tmp tune2; }
git log -1 --format=%H > $R/commit.txt
t test_gemm 90 $B/tests/test_gemm --gtest_filter='GemmBackends.DescribeNamesCuBlasLtAlgorithms:GemmBackends.AllConfigsExactOnSmallIntegers:GemmBackends.ModelShapesAgainstReference:GemmBackends.DeterministicAndGraphCapturable'
grep -hE "^\[  (PASSED|FAILED)|FAILED" $R/test_gemm.txt | head; snap
t tune 430 $B/fp8route tune --model all --tp 1,2,4,8 --m 1,2,4,8,16,24,32,48,64 --scale tensor,row,block -o $R/retune.json --raw $R/retune.raw.jsonl
tail -3 $R/tune.txt; gzip -k $R/retune.raw.jsonl; snap
t moe 70 python3 bench/moe_bench.py --json $R/moe.json
tail -30 $R/moe.txt; snap
