#!/bin/bash
# Device call (at most 590 s). Carry .stage/exp.tar.xz (the working tree's build plus an experiment
# knob, FP8ROUTE_EXP_GROUPED_CLUSTER, that runs the cutlass backend's wide kernel in 2x1 or 1x2
# clusters; unset, the code paths are the working tree's) and .stage/dg.tar.xz (DeepGEMM a5645d7).
# (1) prefill: the wide kernel's cluster shapes beside wgmma, DeepGEMM and torch (prefill_tiles.py);
# (2) the grouped table with the masked points also timed with every expert full (--full-margin 0.1);
# (3) the routed default with it against every backend and torch; (4) the Qwen3-30B-A3B MoE block and
# 16-layer decoder. Outputs: $OUT/call3.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/call3 B=$PWD/build/gpu H=bench/results/2026-12-05-moe-reference
mkdir -p $R /tmp/site build /tmp/dg
tar xJf .stage/exp.tar.xz -C build; tar xJf .stage/dg.tar.xz -C /tmp/dg
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_CLI=$B/fp8route \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/call3.tgz -C /tmp call3; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H200*) TABLE=h200-grouped.json ;; *) TABLE=h100-grouped.json ;; esac
PYTHONPATH=/tmp/dg:$PYTHONPATH DG_CACHE_DIR=/tmp/dgcache DG_NVCC_COMPILER=/usr/local/cuda/bin/nvcc \
  t prefill 200 python3 $H/prefill_tiles.py --rows 256,1024,4096 --json $R/prefill.json
grep -v "^compiled" $R/prefill.txt | tail -60; snap
t tune 160 python3 -m fp8route.tune_grouped --out $R/grouped.json
tail -2 $R/tune.txt
[ -s $R/grouped.json ] && cp $R/grouped.json routes/$TABLE; snap
L=qwen3_30b_a3b.gate_up,qwen3_30b_a3b.down,deepseek_v3.gate_up,deepseek_v3.down,qwen3_235b_a22b.gate_up,qwen3_235b_a22b.down
t bench_routed 60 python3 bench/moe_bench.py --layers $L --m 1,4,16,64 --active 8,all --prefill 512,2048 \
  --scales row,block --backends default,decode,wgmma,cutlass --json $R/bench_routed.json
snap
t moe_layer 50 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --json $R/moe_layer.json
tail -8 $R/moe_layer.txt; snap
t moe_model 60 python3 bench/moe_e2e.py --mode model --layers 16 --batches 1,32 --iters 30 --json $R/moe_model.json
tail -6 $R/moe_model.txt; snap
cat $R/rc.txt
