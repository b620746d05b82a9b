#!/bin/bash
# Device call 2 (about 6 minutes, at most 500 s of timeouts; carry build/gpu): end to end, this
# branch against its branch point (a42bda2: module and Python package in build/gpu/base), one after
# the other; then the full 32- and 80-layer steps with the own and the deep decode ring side by side
# (trace-off module).
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/chain2
mkdir -p $R /tmp/site
python3 -c "import tvm_ffi" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site \
  build/gpu/python/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site FP8ROUTE_SOURCE_DIR=$W
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/chain2.tgz -C /tmp chain2; }
E2E="--models llama-3.1-8b,llama-3.1-70b-tp8 --variants fp8route --batches 1,32 --prefill none --iters 30"
for round in 1; do
  export FP8ROUTE_FFI_LIB=$W/build/gpu/base/_fp8route_ffi.so
  t e2e_base_$round 130 python3 build/gpu/base/bench/e2e.py $E2E \
    --json $R/e2e_base_$round.json
  export FP8ROUTE_FFI_LIB=$W/build/gpu/python/fp8route/_fp8route_ffi.so
  t e2e_new_$round 130 python3 bench/e2e.py $E2E \
    --json $R/e2e_new_$round.json
  grep -hE "decode batch" $R/e2e_*_$round.txt | head -8; snap
done
[ -n "${E2E_ONLY:-}" ] && exit 0  # E2E_ONLY=1: the end-to-end A/B alone
export FP8ROUTE_FFI_LIB=$W/build/gpu/python/fp8route/_fp8route_ffi.so
t ring_8b 110 python3 bench/decode_chain.py \
  --models llama-3.1-8b --layers 32 --empty 0 --split none --reps 100 --json $R/ring_8b.json
t ring_70b 110 python3 bench/decode_chain.py \
  --models llama-3.1-70b-tp8 --layers 80 --empty 0 --split none --reps 100 --json $R/ring_70b.json
grep -h "ring\|roofline" $R/ring_*.txt; snap
