#!/bin/bash
# Device call (at most 590 s). Carry .stage/rel6.tar.xz (release build of the working tree with
# moe_router_logits) and .stage/trace6.tar.xz (its Python module with -DFP8ROUTE_CHAIN_TRACE=ON, no
# CUTLASS). On an H200 the tensor re-tune of ../2026-12-05-trust-h200/call4.sh (narrowed) runs first.
# (1) moe_router_logits and the MoE models on the GPU (tests); (2) the Qwen3-30B-A3B MoE block traced
# with the router kernel (batch 1 and 8); (3) the block and the 16-layer decoder against torch FP8.
# Outputs: $OUT/call2.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/call2 B=$PWD/build/gpu
mkdir -p $R /tmp/site build
nvidia-smi > $R/nvidia-smi.txt 2>&1
tar xJf .stage/rel6.tar.xz -C build; tar xJf .stage/trace6.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_CLI=$B/fp8route \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/call2.tgz -C /tmp call2; }
if grep -q H200 $R/nvidia-smi.txt; then
  TUNE_MODELS=llama-3.1-8b,deepseek-v3 TUNE_TP=1 TUNE_S=120 timeout 330 bash bench/results/2026-12-05-trust-h200/call4.sh \
    > $R/call4.txt 2>&1; echo "call4 rc $?" >> $R/rc.txt
  cp -r /tmp/call4 $R/ 2>/dev/null; snap
fi
t glue_py 90 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe_glue_gpu.py tests/python/test_torch_fake.py
tail -2 $R/glue_py.txt
t models_py 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe_models.py tests/python/test_moe.py
tail -2 $R/models_py.txt; snap
export FP8ROUTE_FFI_LIB=$W/build/gpu/trace/_fp8route_ffi.so
t moe_trace 90 python3 bench/moe_e2e.py --mode layer --batches 1,8 --variants fp8route --trace --json $R/moe_trace.json
grep -A12 "trace batch" $R/moe_trace.txt | head -30; snap
export FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
t moe_layer 60 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --json $R/moe_layer.json
grep "batch" $R/moe_layer.txt; snap
t moe_model 80 python3 bench/moe_e2e.py --mode model --layers 16 --batches 1,32 --iters 30 --json $R/moe_model.json
grep "tok/s" $R/moe_model.txt; snap
cat $R/rc.txt
