#!/bin/bash
# Device call (at most 590 s). Carry .stage/r9.tar.xz: build/gpu with the release build of the working
# tree (fp8route, test_quant, the Python module), its chain-trace Python module (gpu/trace/) and the
# Python module of cd00c43 (gpu/base/, the baseline). Outputs: $OUT/dc.tgz (and $OUT/call4.tgz on an
# H200).
#   both GPUs: the changed kernels' tests (per-token cluster split, scatter destinations, attention).
#   H200: the tensor-scale re-tune and main job of ../2026-12-05-trust-h200/call4.sh (narrowed), then
#         the Llama-3.1-8B decode A/B (baseline against this tree).
#   H100: the decode chain trace, bench/e2e.py and the MoE block A/B, the MoE model GPU tests.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/dc B=$PWD/build/gpu
mkdir -p $R /tmp/site build
nvidia-smi > $R/nvidia-smi.txt 2>&1; head -12 $R/nvidia-smi.txt | grep -E "H100|H200"
tar xJf .stage/r9.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_CLI=$B/fp8route \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
NEW=$B/python/fp8route/_fp8route_ffi.so BASE=$B/base/_fp8route_ffi.so TRACE=$B/trace/_fp8route_ffi.so
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/dc.tgz -C /tmp dc; }
t test_quant 120 $B/tests/test_quant --gtest_filter='RowQuantGpu.*:TokenQuantGpu.*:GroupQuantGpu.*'
tail -3 $R/test_quant.txt
t py_tests 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_attention_gpu.py tests/python/test_moe_glue_gpu.py
tail -3 $R/py_tests.txt; snap
E2E="bench/e2e.py --prefill none --iters 30"
if grep -q H200 $R/nvidia-smi.txt; then
  TUNE_MODELS=llama-3.1-8b,deepseek-v3 TUNE_TP=1 TUNE_S=150 timeout 300 bash bench/results/2026-12-05-trust-h200/call4.sh \
    > $R/call4.txt 2>&1; echo "call4 rc $?" | tee -a $R/rc.txt
  grep -h "problems: routed" /tmp/call4/main*.txt; snap
  FP8ROUTE_FFI_LIB=$BASE t e2e_base 50 python3 $E2E --models llama-3.1-8b --batches 1,32 --variants fp8route --json $R/e2e_base.json
  t e2e_new 60 python3 $E2E --models llama-3.1-8b --batches 1,32 --variants torch_fp8:fused,fp8route --json $R/e2e_new.json
  grep -h "tok/s" $R/e2e_base.txt $R/e2e_new.txt | head; snap
else
  FP8ROUTE_FFI_LIB=$TRACE t chain 60 python3 bench/decode_chain.py --models llama-3.1-8b,llama-3.1-70b-tp8 --layers 8 \
    --ring own --json $R/chain.json
  grep -E "layer \(|step" $R/chain.txt; snap
  M=llama-3.1-8b,llama-3.1-70b-tp8
  FP8ROUTE_FFI_LIB=$BASE t e2e_base 70 python3 $E2E --models $M --batches 1,32 --variants fp8route --json $R/e2e_base.json
  t e2e_new 90 python3 $E2E --models $M --batches 1,32 --variants torch_fp8:fused,fp8route --json $R/e2e_new.json
  grep -h "tok/s" $R/e2e_base.txt $R/e2e_new.txt | head -20; snap
  FP8ROUTE_FFI_LIB=$BASE t moe_base 45 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --variants fp8route,fp8route:block \
    --json $R/moe_base.json
  t moe_new 50 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --variants fp8route,fp8route:block,torch_fp8 \
    --json $R/moe_new.json
  grep -h "batch" $R/moe_base.txt $R/moe_new.txt | head -20; snap
  t models 100 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe_models.py -k gpu
  tail -3 $R/models.txt; snap
fi
cat $R/rc.txt
