#!/bin/bash
# Device call (at most 150 s). Carry .stage/r12.tar.xz (new/python.so: the Python module of 3098a47) and
# .stage/r14.tar.xz (dp/: the Python module with the attention's deep loop taken only where its launch
# keeps the plain loop's shape, and the tvm-ffi wheel). The attention GPU tests, then the decode A/B.
# Outputs: $OUT/c6.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/c6 B=$PWD/build/gpu
mkdir -p $R /tmp/site $B
nvidia-smi -L > $R/nvidia-smi.txt 2>&1; cat $R/nvidia-smi.txt
tar xJf .stage/r12.tar.xz -C $B && tar xJf .stage/r14.tar.xz -C $B
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/dp/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_FFI_LIB=$B/dp/python.so
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/c6.tgz -C /tmp c6; }
t tests 60 python3 -m pytest -q -p no:cacheprovider tests/python/test_attention_gpu.py
tail -1 $R/tests.txt; snap
E2E="bench/e2e.py --prefill none --iters 30 --models llama-3.1-8b,llama-3.1-70b-tp8 --batches 1,8 --variants fp8route"
FP8ROUTE_FFI_LIB=$B/new/python.so t e2e_head 30 python3 $E2E --json $R/e2e_head.json
t e2e_deep 30 python3 $E2E --json $R/e2e_deep.json
grep -h "tok/s" $R/e2e_head.txt $R/e2e_deep.txt | grep -v "(tok/s"; snap
cat $R/rc.txt
