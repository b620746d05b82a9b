#!/bin/bash
# Device call (at most 590 s; carry .stage/moe2.tar.xz, a release build with the grouped decode
# backend's stream-K division, unpacked into build/ first): its tests, the divisions side by side,
# the grouped routing table measured on this GPU, the routed default against every backend and torch
# with it, the MoE layer and decoder end to end with it, the real expert shapes. Outputs in
# $OUT/callB.tgz after each step.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/callB B=$PWD/build/gpu
mkdir -p $R /tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/callB.tgz -C /tmp callB; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H200*) TABLE=h200-grouped.json ;; *) TABLE=h100-grouped.json ;; esac
# 1. Correctness: every division of the decode backend (stream-K forced included) and the rest of
#    MoeFast, the Python MoE suites.
t test_moe 120 stdbuf -oL $B/tests/test_moe --gtest_filter='MoeFast.*:MoeSplitRule.*:-MoeFast.RealExpertShapes'
grep -hE "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $R/test_moe.txt
t moe_py 90 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe.py tests/python/test_moe_glue_gpu.py
tail -3 $R/moe_py.txt; snap
# 2. The divisions side by side at decode sizes (8 active experts and every expert), every catalog layer.
t divisions 90 python3 bench/moe_bench.py --layers qwen3_30b_a3b.gate_up,qwen3_30b_a3b.down,deepseek_v3.gate_up,deepseek_v3.down,qwen3_235b_a22b.gate_up,qwen3_235b_a22b.down \
  --m 1,4,16 --active 8,all --prefill "" --scales row,block --backends default,wgmma --decode-splits 1,k \
  --json $R/divisions.json
grep -E "^\S|decode@|default" $R/divisions.txt | head -120; snap
# 3. The grouped routing table on this GPU (every catalog MoE layer, both forms, every scale kind).
t tune 150 python3 -m fp8route.tune_grouped --out $R/grouped.json
tail -3 $R/tune.txt
[ -s $R/grouped.json ] && cp $R/grouped.json routes/$TABLE; snap
# 4. The routed default with that table (routes/ is where the library finds it) beside each backend and torch.
t bench_routed 90 python3 bench/moe_bench.py --layers qwen3_30b_a3b.gate_up,qwen3_30b_a3b.down,deepseek_v3.gate_up,deepseek_v3.down,qwen3_235b_a22b.gate_up,qwen3_235b_a22b.down \
  --m 1,4,16,64 --active 8,all --prefill 512,2048 --scales row,block --backends default,decode,wgmma,cutlass \
  --json $R/bench_routed.json
snap
# 5. The layer and the decoder end to end with the table.
t moe_layer 60 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --torch-glue --profile --json $R/moe_layer.json
tail -14 $R/moe_layer.txt; snap
t moe_model 60 python3 bench/moe_e2e.py --mode model --layers 16 --batches 1,32 --iters 30 --json $R/moe_model.json
tail -8 $R/moe_model.txt; snap
t moe_layer_ds 50 python3 bench/moe_e2e.py --mode layer --model deepseek-v3-ep8 --moe-layers 4 --batches 1,8,32 \
  --variants fp8route,torch_fp8 --torch-glue --json $R/moe_layer_ds.json
tail -8 $R/moe_layer_ds.txt; snap
# 6. The real expert shapes, every backend (the rule's divisions) against simt.
t real_shapes 110 stdbuf -oL $B/tests/test_moe --gtest_filter=MoeFast.RealExpertShapes
tail -3 $R/real_shapes.txt; snap
