#!/bin/bash
# Device call (at most about 170 s: the session's last device time). Carry .stage/r17.tar.xz (call3's
# build: the one-line L2 prefetches). On an H200: the grouped table measured again with the
# narrowed full-experts check (80894ff), the Qwen3-30B-A3B block with it and with the H100 table
# (each with and without the gate_up GEMM's w2 prefetch), Llama decode with and without the
# attention's o_proj prefetch. On another GPU: call3's benchmarks without its tests. Outputs: $OUT/l2d.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/l2d B=$PWD/build/gpu
mkdir -p $R /tmp/site build/gpu
nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
tar xJf .stage/r17.tar.xz -C build/gpu
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/new/apache_tvm_ffi-*.whl > /dev/null 2>&1
NEW=$B/new/python.so TRACE=$B/new/trace.so
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_FFI_LIB=$NEW
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/l2d.tgz -C /tmp l2d; }
MOE="bench/moe_e2e.py --mode layer --batches 1,8,32 --variants fp8route --no-prefetch"
if grep -q H200 $R/gpu.txt; then
  t tune_grouped 80 python3 -m fp8route.tune_grouped --out $R/h200-grouped.json
  tail -1 $R/tune_grouped.txt; snap
  FP8ROUTE_GROUPED_TABLE=$R/h200-grouped.json t moe_h200t 25 python3 $MOE --json $R/moe_h200t.json
  FP8ROUTE_GROUPED_TABLE=$W/routes/h100-grouped.json t moe_h100t 25 python3 $MOE --json $R/moe_h100t.json
  grep -h "batch" $R/moe_h200t.txt $R/moe_h100t.txt; snap
else
  t moe 25 python3 $MOE --json $R/moe.json
  grep -h "batch" $R/moe.txt; snap
  FP8ROUTE_FFI_LIB=$TRACE t moe_trace 25 python3 bench/moe_e2e.py --mode layer --batches 1 --variants fp8route \
    --no-prefetch --trace --json $R/moe_trace.json
  grep -E "grouped|block \(" $R/moe_trace.txt | head; snap
fi
t e2e 45 python3 bench/e2e.py --prefill none --iters 20 --models llama-3.1-8b,llama-3.1-70b-tp8 --batches 1,8,32 \
  --variants fp8route --no-prefetch --json $R/e2e.json
grep -h "tok/s" $R/e2e.txt | grep -v "(tok/s"; snap
cat $R/rc.txt
