#!/bin/bash
# Device call 1 (about 6 minutes, at most 545 s of timeouts; carry build/gpu): the suites the decode-chain commits touch, then
# the chain bench with the trace build (calibrations, 8B and 70B-TP8 rank, own and deep ring).
# Everything lands in $OUT/chain1.tgz (re-packed after each step, so a timeout keeps what ran).
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/chain1
mkdir -p $R /tmp/site
python3 -c "import tvm_ffi" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site \
  build/gpu/python/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site FP8ROUTE_SOURCE_DIR=$W
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/chain1.tgz -C /tmp chain1; }
nvidia-smi > $R/nvidia-smi.txt 2>&1; git log -1 --format=%H > $R/commit.txt
if [ -z "${CHAIN_ONLY:-}" ]; then  # CHAIN_ONLY=1: the chain bench alone; TESTS_ONLY=1: the suites alone
  t test_norm 45 build/gpu/tests/test_norm
  t test_attention 90 build/gpu/tests/test_attention
  t test_gemm 120 build/gpu/tests/test_gemm --gtest_filter='DecodeBackend.DeepRing*:DecodeBackend.DependentLaunch*:LinearPlanGpu.*'
  grep -hE "^\[  (PASSED|FAILED) |^\[  FAILED" $R/test_*.txt | head -20
  snap
  export FP8ROUTE_FFI_LIB=$W/build/gpu/python/fp8route/_fp8route_ffi.so
  t pytest 90 python3 -m pytest -q -p no:cacheprovider tests/python/test_norm_gpu.py tests/python/test_attention_gpu.py
  tail -3 $R/pytest.txt; snap
fi
[ -n "${TESTS_ONLY:-}" ] && exit 0
export FP8ROUTE_FFI_LIB=$W/build/gpu/trace/_fp8route_ffi.so
t chain 200 python3 bench/decode_chain.py --layers 8 --reps 200 --trace-reps 50 --json $R/chain.json
tail -60 $R/chain.txt; snap
