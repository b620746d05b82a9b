#!/bin/bash
# Device call (at most 580 s). Carry .stage/h200plan.tar.xz (release build of cd00c43: fp8route and the
# Python module, the baseline) and .stage/r11.tar.xz (new/python.so and new/trace.so: the Python
# module of the working tree, release and chain-trace builds). Outputs: $OUT/c3.tgz (and
# $OUT/call4.tgz on an H200).
#   H200: the attention and MoE glue GPU tests, the tensor-scale re-tune and main job of
#         ../2026-12-05-trust-h200/call4.sh (narrowed), the H200 grouped table, and the decode A/B.
#   H100: the tests, the Llama decode chain trace and the MoE block trace of the new module, the
#         decode and MoE block A/B (baseline against the working tree).
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/c3 B=$PWD/build/gpu
mkdir -p $R /tmp/site build
nvidia-smi > $R/nvidia-smi.txt 2>&1; head -12 $R/nvidia-smi.txt | grep -E "H100|H200"
tar xJf .stage/h200plan.tar.xz -C build && tar xJf .stage/r11.tar.xz -C build/gpu
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
BASE=$B/python/fp8route/_fp8route_ffi.so NEW=$B/new/python.so TRACE=$B/new/trace.so
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_CLI=$B/fp8route FP8ROUTE_FFI_LIB=$NEW
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/c3.tgz -C /tmp c3; }
t tests 90 python3 -m pytest -q -p no:cacheprovider tests/python/test_attention_gpu.py tests/python/test_moe_glue_gpu.py
tail -2 $R/tests.txt; snap
E2E="bench/e2e.py --prefill none --iters 30 --models llama-3.1-8b,llama-3.1-70b-tp8 --batches 1,32"
ab() {
  FP8ROUTE_FFI_LIB=$BASE t e2e_base 60 python3 $E2E --variants fp8route --json $R/e2e_base.json
  t e2e_new 80 python3 $E2E --variants torch_fp8:fused,fp8route --json $R/e2e_new.json
  grep -h "tok/s" $R/e2e_base.txt $R/e2e_new.txt | grep -v "(tok/s" ; snap
}
if grep -q H200 $R/nvidia-smi.txt; then
  FP8ROUTE_FFI_LIB=$BASE TUNE_MODELS=llama-3.1-8b,deepseek-v3 TUNE_TP=1 TUNE_S=150 timeout 300 \
    bash bench/results/2026-12-05-trust-h200/call4.sh > $R/call4.txt 2>&1; echo "call4 rc $?" | tee -a $R/rc.txt
  grep -h "problems: routed" /tmp/call4/main*.txt; snap
  t tune_grouped 80 python3 -m fp8route.tune_grouped --out $R/h200-grouped.json; snap
  ab
else
  FP8ROUTE_FFI_LIB=$TRACE t chain 60 python3 bench/decode_chain.py --models llama-3.1-8b,llama-3.1-70b-tp8 --layers 8 \
    --ring own --json $R/chain.json
  grep -E "attention|layer \(" $R/chain.txt; snap
  FP8ROUTE_FFI_LIB=$TRACE t moe_trace 60 python3 bench/moe_e2e.py --mode layer --batches 1,8 --variants fp8route --trace \
    --json $R/moe_trace.json
  snap
  ab
  FP8ROUTE_FFI_LIB=$BASE t moe_base 45 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --variants fp8route \
    --json $R/moe_base.json
  t moe_new 45 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --variants fp8route --json $R/moe_new.json
  grep -h "batch" $R/moe_base.txt $R/moe_new.txt; snap
fi
cat $R/rc.txt
