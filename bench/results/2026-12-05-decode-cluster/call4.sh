#!/bin/bash
# Device call (at most 400 s). Carry .stage/h200plan.tar.xz (release build of cd00c43, the baseline) and
# .stage/r12.tar.xz (new/: the Python module of the final tree, release and chain-trace builds, and
# test_quant). The changed kernels' tests, the Llama decode chain and MoE block traces, and the decode
# and MoE block A/B against the baseline. Outputs: $OUT/c4.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/c4 B=$PWD/build/gpu
mkdir -p $R /tmp/site build
nvidia-smi > $R/nvidia-smi.txt 2>&1; head -12 $R/nvidia-smi.txt | grep -E "H100|H200"
tar xJf .stage/h200plan.tar.xz -C build && tar xJf .stage/r12.tar.xz -C build/gpu
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
BASE=$B/python/fp8route/_fp8route_ffi.so NEW=$B/new/python.so TRACE=$B/new/trace.so
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_CLI=$B/fp8route FP8ROUTE_FFI_LIB=$NEW
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/c4.tgz -C /tmp c4; }
t test_quant 60 $B/new/test_quant --gtest_filter='GroupQuantGpu.Scatter*:RowQuantGpu.PerTokenBitExact'
tail -1 $R/test_quant.txt
t tests 90 python3 -m pytest -q -p no:cacheprovider tests/python/test_attention_gpu.py tests/python/test_moe_glue_gpu.py
tail -1 $R/tests.txt; snap
FP8ROUTE_FFI_LIB=$TRACE t chain 60 python3 bench/decode_chain.py --models llama-3.1-8b,llama-3.1-70b-tp8 --layers 8 \
  --ring own --json $R/chain.json
grep -E "attention|layer \(" $R/chain.txt
FP8ROUTE_FFI_LIB=$TRACE t moe_trace 40 python3 bench/moe_e2e.py --mode layer --batches 1,8 --variants fp8route --trace \
  --json $R/moe_trace.json
grep -E "route_masked|combine|block \(" $R/moe_trace.txt; snap
E2E="bench/e2e.py --prefill none --iters 30 --models llama-3.1-8b,llama-3.1-70b-tp8 --batches 1,32"
FP8ROUTE_FFI_LIB=$BASE t e2e_base 60 python3 $E2E --variants fp8route --json $R/e2e_base.json
t e2e_new 60 python3 $E2E --variants fp8route --json $R/e2e_new.json
grep -h "tok/s" $R/e2e_base.txt $R/e2e_new.txt | grep -v "(tok/s"; snap
FP8ROUTE_FFI_LIB=$BASE t moe_base 40 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --variants fp8route \
  --json $R/moe_base.json
t moe_new 40 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --variants fp8route --json $R/moe_new.json
grep -h "batch" $R/moe_base.txt $R/moe_new.txt; snap
cat $R/rc.txt
