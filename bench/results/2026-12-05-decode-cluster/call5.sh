#!/bin/bash
# Device call (at most 240 s). Carry .stage/r12.tar.xz (new/: the Python module of 3098a47, release and
# chain-trace builds) and .stage/r13.tar.xz (k8/: the same with the attention's 8 positions per lane
# per iteration at one query head per block, and the tvm-ffi wheel). The attention GPU tests of k8,
# both chain traces of the Llama layers, and the decode A/B. Outputs: $OUT/c5.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/c5 B=$PWD/build/gpu
mkdir -p $R /tmp/site $B
nvidia-smi > $R/nvidia-smi.txt 2>&1; head -12 $R/nvidia-smi.txt | grep -E "H100|H200"
tar xJf .stage/r12.tar.xz -C $B && tar xJf .stage/r13.tar.xz -C $B
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/k8/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_FFI_LIB=$B/k8/python.so
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/c5.tgz -C /tmp c5; }
t tests 60 python3 -m pytest -q -p no:cacheprovider tests/python/test_attention_gpu.py
tail -1 $R/tests.txt; snap
CH="bench/decode_chain.py --models llama-3.1-8b,llama-3.1-70b-tp8 --layers 8 --ring own --empty 0 --split none"
FP8ROUTE_FFI_LIB=$B/new/trace.so t chain_head 45 python3 $CH --json $R/chain_head.json
FP8ROUTE_FFI_LIB=$B/k8/trace.so t chain_k8 45 python3 $CH --json $R/chain_k8.json
grep -hE "attention|     o  |layer \(" $R/chain_head.txt $R/chain_k8.txt; snap
E2E="bench/e2e.py --prefill none --iters 30 --models llama-3.1-8b,llama-3.1-70b-tp8 --batches 1,8,32 --variants fp8route"
FP8ROUTE_FFI_LIB=$B/new/python.so t e2e_head 40 python3 $E2E --json $R/e2e_head.json
t e2e_k8 40 python3 $E2E --json $R/e2e_k8.json
grep -h "tok/s" $R/e2e_head.txt $R/e2e_k8.txt | grep -v "(tok/s"; snap
cat $R/rc.txt
