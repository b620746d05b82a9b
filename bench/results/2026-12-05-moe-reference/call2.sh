#!/bin/bash
# Device call (at most 590 s). Carry .stage/moe.tar.xz (build of 3873d28: the cutlass grouped backend
# with 128 x 32 swap-AB tiles up to 64 rows) and .stage/moe4.tar.xz (the working tree's build: 128 x 64
# tiles for 33-64 rows). (1) MoeFast with the new tiles; (2) the cutlass backend at 64 rows per expert,
# old and new builds, beside torch; (3) the grouped routing table on this GPU; (4) the routed default
# with it against every backend and torch; (5) the Qwen3-30B-A3B MoE block. Outputs: $OUT/call2.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/call2 B=$PWD/build/gpu
mkdir -p $R /tmp/site build/old
tar xJf .stage/moe.tar.xz -C build/old; tar xJf .stage/moe4.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/call2.tgz -C /tmp call2; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H200*) TABLE=h200-grouped.json ;; *) TABLE=h100-grouped.json ;; esac
t test_moe 150 stdbuf -oL $B/tests/test_moe --gtest_filter='MoeFast.*:-MoeFast.RealExpertShapes'
grep -hE "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $R/test_moe.txt; snap
L=qwen3_30b_a3b.gate_up,qwen3_30b_a3b.down,deepseek_v3.gate_up,deepseek_v3.down,qwen3_235b_a22b.gate_up,qwen3_235b_a22b.down
for v in old new; do
  lib=$B/python/fp8route/_fp8route_ffi.so; [ $v = old ] && lib=$W/build/old/gpu/python/fp8route/_fp8route_ffi.so
  FP8ROUTE_FFI_LIB=$lib t tiles_$v 70 python3 bench/moe_bench.py --layers $L --m 32,64 --active 8,all --prefill "" \
    --scales row,block --backends cutlass --json $R/tiles_$v.json
done
snap
export FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
t tune 120 python3 -m fp8route.tune_grouped --out $R/grouped.json
tail -3 $R/tune.txt
[ -s $R/grouped.json ] && cp $R/grouped.json routes/$TABLE; snap
t bench_routed 110 python3 bench/moe_bench.py --layers $L --m 1,4,16,64 --active 8,all --prefill 512,2048 \
  --scales row,block --backends default,decode,wgmma,cutlass --json $R/bench_routed.json
snap
t moe_layer 60 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --json $R/moe_layer.json
tail -8 $R/moe_layer.txt; snap
cat $R/rc.txt
