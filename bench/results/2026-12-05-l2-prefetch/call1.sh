#!/bin/bash
# Device call (at most 590 s). Carry .stage/h200head.tar.xz (release build of 0df19ee: the baseline module
# and the fp8route tool) and .stage/r15.tar.xz (new/: the Python module with the dispatch's L2 prefetch,
# release and chain-trace builds). The MoE tests, then the MoE block with and without the prefetch
# (same process, interleaved) and against the baseline module, traced kernel by kernel; on an H200
# first the narrowed tensor-scale re-tune of ../2026-12-05-trust-h200/call4.sh. Outputs: $OUT/l2.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/l2 B=$PWD/build/gpu
mkdir -p $R /tmp/site build
nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
tar xJf .stage/h200head.tar.xz -C build && tar xJf .stage/r15.tar.xz -C build/gpu
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
BASE=$B/python/fp8route/_fp8route_ffi.so NEW=$B/new/python.so TRACE=$B/new/trace.so
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_CLI=$B/fp8route FP8ROUTE_FFI_LIB=$NEW
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/l2.tgz -C /tmp l2; }
if grep -q H200 $R/gpu.txt; then
  TUNE_MODELS=llama-3.1-8b,deepseek-v3 TUNE_TP=1 TUNE_S=150 timeout 330 bash bench/results/2026-12-05-trust-h200/call4.sh \
    > $R/call4.txt 2>&1; echo "call4 rc $?" | tee -a $R/rc.txt
  cp -r /tmp/call4 $R/ 2>/dev/null; grep -h "problems: routed" /tmp/call4/main*.txt; snap
fi
t tests 150 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe_glue_gpu.py tests/python/test_moe.py \
  tests/python/test_moe_models.py
tail -1 $R/tests.txt; snap
MOE="bench/moe_e2e.py --mode layer --batches 1,8,32 --variants fp8route,fp8route:block --no-prefetch"
t moe_new 60 python3 $MOE --json $R/moe_new.json
FP8ROUTE_FFI_LIB=$BASE t moe_base 60 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 \
  --variants fp8route,fp8route:block --json $R/moe_base.json
grep -h "batch" $R/moe_new.txt $R/moe_base.txt; snap
FP8ROUTE_FFI_LIB=$TRACE t moe_trace 60 python3 bench/moe_e2e.py --mode layer --batches 1,8 --variants fp8route \
  --no-prefetch --trace --json $R/moe_trace.json
grep -E "route_masked|grouped|combine|block \(" $R/moe_trace.txt | head -40; snap
for m in qwen3-235b-a22b-ep8 mixtral-8x7b; do
  t moe_$m 50 python3 bench/moe_e2e.py --mode layer --model $m --moe-layers 4 --batches 1,8 --variants fp8route \
    --no-prefetch --json $R/moe_$m.json
  grep -h "batch" $R/moe_$m.txt; snap
done
cat $R/rc.txt
