#!/bin/bash
# Device call (at most 230 s; carry .stage/moe3.tar.xz, the release build of 235c5d1, unpacked into
# build/ first): MoeFast.DecodeEveryDivision as kept (cluster divisions, then a repeat and two streams
# at one split); the MoE layer of Mixtral-8x7B and of one EP-8 rank of Qwen3-235B-A22B against torch.
# Outputs in $OUT/callE.tgz after each step.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/callE B=$PWD/build/gpu
mkdir -p $R /tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/callE.tgz -C /tmp callE; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
t divisions_test 60 stdbuf -oL $B/tests/test_moe --gtest_filter='MoeFast.DecodeEveryDivision'
grep -hE "^\[  (PASSED|FAILED) |Failure" $R/divisions_test.txt | head; snap
t mixtral_layer 60 python3 bench/moe_e2e.py --mode layer --model mixtral-8x7b --moe-layers 4 --batches 1,8,32 \
  --json $R/mixtral_layer.json
tail -14 $R/mixtral_layer.txt; snap
t q235_layer 60 python3 bench/moe_e2e.py --mode layer --model qwen3-235b-a22b-ep8 --moe-layers 4 --batches 1,8,32 \
  --json $R/q235_layer.json
tail -14 $R/q235_layer.txt; snap
