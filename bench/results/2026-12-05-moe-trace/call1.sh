#!/bin/bash
# Device call (at most 590 s). Carry .stage/rel5.tar.xz (release build of the working tree: the
# trace hooks compiled out) and .stage/trace5.tar.xz (its Python module built with
# -DFP8ROUTE_CHAIN_TRACE=ON, no CUTLASS). On an H200, the tensor re-tune of
# ../2026-12-05-trust-h200/call4.sh (narrowed) runs first. Then: (1) the kernels whose code changed
# (combine, per-token quant launcher, grouped decode) in their GPU tests; (2) the Qwen3-30B-A3B MoE
# block traced kernel by kernel at batch 1 and 8 (bench/moe_e2e.py --trace); (3) the Llama-3.1-8B
# decode chain with the per-token quant kernels now traced (bench/decode_chain.py).
# Outputs: $OUT/call1.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/call1 B=$PWD/build/gpu
mkdir -p $R /tmp/site build
nvidia-smi > $R/nvidia-smi.txt 2>&1
tar xJf .stage/rel5.tar.xz -C build; tar xJf .stage/trace5.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_CLI=$B/fp8route \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/call1.tgz -C /tmp call1; }
if grep -q H200 $R/nvidia-smi.txt; then
  TUNE_MODELS=llama-3.1-8b,deepseek-v3 TUNE_TP=1 TUNE_S=150 timeout 400 bash bench/results/2026-12-05-trust-h200/call4.sh \
    > $R/call4.txt 2>&1; echo "call4 rc $?" >> $R/rc.txt
  cp -r /tmp/call4 $R/ 2>/dev/null; snap
fi
t test_moe 100 stdbuf -oL $B/tests/test_moe --gtest_filter='MoeFast.*:-MoeFast.RealExpertShapes:MoeFast.DecodeEveryDivision'
grep -hE "^\[  (PASSED|FAILED) |FAILED  \]" $R/test_moe.txt
t test_quant 100 stdbuf -oL $B/tests/test_quant --gtest_filter='RowQuantGpu.*:TokenQuantGpu.*'
grep -hE "^\[  (PASSED|FAILED) |FAILED  \]" $R/test_quant.txt
t glue_py 100 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe_glue_gpu.py
tail -2 $R/glue_py.txt; snap
export FP8ROUTE_FFI_LIB=$W/build/gpu/trace/_fp8route_ffi.so
t moe_trace 120 python3 bench/moe_e2e.py --mode layer --batches 1,8 --variants fp8route,fp8route:block --trace \
  --json $R/moe_trace.json
grep -vE "^\s*$" $R/moe_trace.txt | tail -40; snap
t chain 100 python3 bench/decode_chain.py --models llama-3.1-8b --layers 8 --ring own --empty 0 --split none \
  --json $R/chain.json
tail -16 $R/chain.txt; snap
cat $R/rc.txt
