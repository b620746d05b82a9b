#!/bin/bash
# Device call (at most 200 s; carry .stage/moe.tar.xz, the release build of 3873d28, whose product code
# c58f19b restores, unpacked into build/ first): the Fp8MoE float-reference test that failed once in
# callB, twenty fresh runs; the Qwen3-30B-A3B MoE layer and decoder with the shipped grouped table of
# this GPU kind. Outputs in $OUT/callD.tgz after each step.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/callD B=$PWD/build/gpu
mkdir -p $R /tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/callD.tgz -C /tmp callD; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
# Twenty fresh runs of each parametrization in one process (the test draws new random data each call).
t float_ref 60 python3 - <<'PY'
import itertools, sys, traceback
sys.path.insert(0, "tests/python")
import test_moe
fails = 0
for routing, masked, scale in itertools.product(["softmax", "sigmoid"], [False, True], ["block", "row"]):
    for i in range(20):
        try:
            test_moe.test_fp8moe_against_the_float_reference(scale, masked, routing)
        except AssertionError as e:
            fails += 1
            print(f"FAIL {routing} masked={masked} {scale} run {i}: {str(e).splitlines()[0]}")
    print(f"done {routing} masked={masked} {scale}", flush=True)
print(f"{fails} failed of {8 * 20}")
PY
tail -12 $R/float_ref.txt; snap
t moe_layer 50 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --torch-glue --profile --json $R/moe_layer.json
tail -14 $R/moe_layer.txt; snap
t moe_model 45 python3 bench/moe_e2e.py --mode model --layers 16 --batches 1,32 --iters 30 --json $R/moe_model.json
tail -8 $R/moe_model.txt; snap
