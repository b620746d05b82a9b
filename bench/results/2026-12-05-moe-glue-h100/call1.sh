#!/bin/bash
# Device call (carry .stage with gpu.tar.xz: build/gpu of this branch's release build, packed as
#   cd build && tar cf - gpu/fp8route gpu/python gpu/tests/test_moe | xz -T2 -6 > ../.stage/gpu.tar.xz
# after FP8ROUTE_STAGE="tools tests python" FP8ROUTE_STAGE_TOOLS=fp8route FP8ROUTE_STAGE_TESTS=test_moe
# scripts/stage_gpu.sh). Outputs in $OUT/glue1.tgz, re-packed after each step.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/glue1 B=$PWD/build/gpu
mkdir -p $R /tmp/site build && { [ -d build/gpu ] || tar xJf .stage/gpu.tar.xz -C build; }
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/glue1.tgz -C /tmp glue1; }
t glue_tests 150 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe_glue_gpu.py tests/python/test_moe.py
tail -5 $R/glue_tests.txt; snap
t test_moe 60 $B/tests/test_moe --gtest_filter='MoeFast.*'
t moe_e2e 120 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --torch-glue --json $R/moe_e2e.json
tail -14 $R/moe_e2e.txt; snap
t moe_mmax 90 python3 bench/moe_bench.py --layers qwen3_30b_a3b.gate_up,deepseek_v3.gate_up --m 1,2,4 \
  --active 8,all --m-max 32 --prefill "" --scales row --json $R/moe_mmax.json
snap
