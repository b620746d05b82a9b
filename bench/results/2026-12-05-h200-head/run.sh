#!/bin/bash
# The H200 plan of ../2026-12-05-h200-plan/run.sh on the release build of 0df19ee (at most 600 s).
# Carry .stage/h200head.tar.xz (the fp8route tool, the Python module and test_attention, packed by
# FP8ROUTE_STAGE="tools tests python" FP8ROUTE_STAGE_TOOLS=fp8route FP8ROUTE_STAGE_TESTS=test_attention
# FP8ROUTE_STAGE_PACK=.stage/h200head.tar.xz scripts/stage_gpu.sh). On any GPU it first runs the C++
# attention suite; on a GPU other than an H200 it stops there (exit 3).
#   1. the tensor-scale M <= 64 re-tune of the main job's model and DeepSeek-V3 with the final round at
#      16 graph instances, the table rebuilt, the main job three times, every catalog tensor problem
#      against torch._scaled_mm (../2026-12-05-trust-h200/call4.sh, narrowed): #43 items 3 and 5;
#   2. the grouped routing table of this GPU (routes/h200-grouped.json, with --full-margin) and the
#      Qwen3-30B-A3B MoE block and decoder against torch FP8: #45's figures on the GPU its targets name;
#   3. bench/e2e.py on Llama-3.1-8B and the 70B TP-8 rank at batch 1 and 32: #46's figures.
# Outputs: $OUT/h200.tgz after each step; bring back the new raw tune file and the manifest edit of
# step 1 (rebuild routes/h200.json on the CPU machine), and the grouped table of step 2.
set -u
cd "$(dirname "$0")/../../.."
nvidia-smi -L > /tmp/gpu.txt 2>&1
W=$PWD R=/tmp/h200 B=$PWD/build/gpu
mkdir -p $R /tmp/site build && cp /tmp/gpu.txt $R/
tar xJf .stage/h200head.tar.xz -C build
# On any GPU: the C++ attention suite (the deep loop's first GPU run of it); then only an H200 goes on.
timeout 50 $B/tests/test_attention > $R/test_attention.txt 2>&1; echo "test_attention rc $?" | tee -a $R/rc.txt
tail -3 $R/test_attention.txt; tar czf $OUT/h200.tgz -C /tmp h200
grep -q H200 /tmp/gpu.txt || { cat /tmp/gpu.txt; exit 3; }
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_CLI=$B/fp8route \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/h200.tgz -C /tmp h200; }
TUNE_MODELS=llama-3.1-8b,deepseek-v3 TUNE_TP=1 TUNE_S=150 timeout 330 bash bench/results/2026-12-05-trust-h200/call4.sh \
  > $R/call4.txt 2>&1; echo "call4 rc $?" | tee -a $R/rc.txt
cp -r /tmp/call4 $R/ 2>/dev/null; grep -h "problems: routed" /tmp/call4/main*.txt; snap
t tune_grouped 90 python3 -m fp8route.tune_grouped --out $R/h200-grouped.json
[ -s $R/h200-grouped.json ] && cp $R/h200-grouped.json routes/h200-grouped.json; snap
t moe_layer 45 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --json $R/moe_layer.json
grep "batch" $R/moe_layer.txt; snap
t e2e 80 python3 bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8 --batches 1,32 --prefill none --iters 30 \
  --json $R/e2e.json
grep -hE "tok/s" $R/e2e.txt | head -12; snap
cat $R/rc.txt
