#!/bin/bash
# Device call (at most 590 s). Carry .stage/moe2.tar.xz, .stage/chain.tar.xz and .stage/dg.tar.xz,
# unpack the first two into build/ first. (1) DeepGEMM's grouped masked and contiguous kernels beside
# fp8route's grouped backends (../2026-12-05-moe-next/call3.sh: DeepGEMM a5645d7 JIT-compiled here,
# an outside reference never in the repository); (2) the decode chain trace (Llama-3.1-8B and the
# 70B TP-8 rank at batch 1, per kernel; the trace build of ../2026-12-05-decode-chain-h200/); (3)
# bench/e2e.py on both models at batch 1 and 32, every variant. Outputs in $OUT/dgg.tgz (step 1) and
# $OUT/callC.tgz (steps 2-3).
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/callC
mkdir -p $R /tmp/site
s=$(date +%s)
DG_TIMEOUT=350 timeout 380 bash bench/results/2026-12-05-moe-next/call3.sh > $R/dg_call.txt 2>&1
echo "dg rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt
python3 -c "import tvm_ffi" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site \
  build/gpu/python/apache_tvm_ffi-*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/callC.tgz -C /tmp callC; }
nvidia-smi > $R/nvidia-smi.txt 2>&1
export FP8ROUTE_FFI_LIB=$W/build/gpu/trace/_fp8route_ffi.so
t chain 70 python3 bench/decode_chain.py --layers 8 --reps 200 --trace-reps 50 --ring own --json $R/chain.json
tail -40 $R/chain.txt; snap
export FP8ROUTE_FFI_LIB=$W/build/gpu/python/fp8route/_fp8route_ffi.so
t e2e 120 python3 bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8 --batches 1,32 --prefill none --iters 30 \
  --json $R/e2e.json
grep -hE "decode batch|tok/s" $R/e2e.txt | head -30; snap
