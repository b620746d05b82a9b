#!/bin/bash
# Device call (at most 300 s). Carry .stage/rel7.tar.xz (the Python module of the working tree:
# moe_router_logits without the data-dependent break that kept its sums in local memory) and
# .stage/trace7.tar.xz (the same with -DFP8ROUTE_CHAIN_TRACE=ON). (1) The expert-parallel MoE
# model test with the router kernel and with F.linear (ROUTER_MAX_TOKENS = 0); (2) the Qwen3-30B-A3B
# block traced and timed against torch FP8. Outputs: $OUT/call3.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/call3 B=$PWD/build/gpu
mkdir -p $R /tmp/site build
nvidia-smi > $R/nvidia-smi.txt 2>&1
tar xJf .stage/rel7.tar.xz -C build; tar xJf .stage/trace7.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/call3.tgz -C /tmp call3; }
T="tests/python/test_moe_models.py -k gpu"
t models_router 60 python3 -m pytest -q -p no:cacheprovider $T
tail -6 $R/models_router.txt
t models_linear 60 python3 -c "import sys, pytest, fp8route.moe as m; m.ROUTER_MAX_TOKENS = 0; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/python/test_moe_models.py', '-k', 'gpu']))"
tail -6 $R/models_linear.txt; snap
t router_py 40 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe_glue_gpu.py -k router
tail -2 $R/router_py.txt
export FP8ROUTE_FFI_LIB=$W/build/gpu/trace/_fp8route_ffi.so
t moe_trace 60 python3 bench/moe_e2e.py --mode layer --batches 1,8 --variants fp8route --trace --json $R/moe_trace.json
grep -A10 "trace batch" $R/moe_trace.txt | grep -E "router|route_|block" ; snap
export FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
t moe_layer 60 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --json $R/moe_layer.json
grep "batch" $R/moe_layer.txt; snap
cat $R/rc.txt
