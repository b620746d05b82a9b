#!/bin/bash
set -u
cd "$(dirname "$0")/.."
W=$PWD R=/tmp/run3 B=$PWD/build/gpu
mkdir -p $R /tmp/site build && tar xJf .stage/gpu3.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/run3.tgz -C /tmp run3; }
git log -1 --format=%H > $R/commit.txt; md5sum routes/h200.json > $R/table.md5
for i in 1 2 3; do
  [ $i = 3 ] && ! grep -qE "^[1-9][0-9]* of 300 problems: routed" $R/main1.txt $R/main2.txt && break
  t main$i 65 $B/fp8route; grep -hE "problems: routed" $R/main$i.txt; snap
done
t test_moe_rule 60 $B/tests/test_moe --gtest_filter=MoeFast.DefaultBackendRule
grep -hE "PASSED|FAILED" $R/test_moe_rule.txt
t python_bench 50 python3 bench/python_bench.py --model deepseek-v3 --m 1,4,16,64
tail -8 $R/python_bench.txt; snap
t moe_e2e 110 python3 bench/moe_e2e.py --mode layer --batches 1,32 --json $R/moe_e2e.json
tail -12 $R/moe_e2e.txt; snap
