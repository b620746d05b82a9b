#!/bin/bash
# Device call (at most 200 s): call2.sh, its tests narrowed to the prefetch cases and without the
# other MoE models, with the prefetches issued one 128-byte line per
# prefetch.global.L2 instead of 32 KB bulk prefetches. Carry .stage/r17.tar.xz (new/: the tvm-ffi wheel and the Python module with the L2 prefetches,
# release and chain-trace builds: the grouped decode GEMM streaming the next GEMM's weight, the
# attention streaming o_proj's). Tests, then each prefetch against the same model without it in
# one process (interleaved): MoE blocks (bench/moe_e2e.py --no-prefetch), Llama decode
# (bench/e2e.py --no-prefetch), and the chain traces. Outputs: $OUT/l2c.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/l2c B=$PWD/build/gpu
mkdir -p $R /tmp/site build/gpu
nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
tar xJf .stage/r17.tar.xz -C build/gpu
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/new/apache_tvm_ffi-*.whl > /dev/null 2>&1
NEW=$B/new/python.so TRACE=$B/new/trace.so
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_FFI_LIB=$NEW
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/l2c.tgz -C /tmp l2c; }
t tests 60 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe.py tests/python/test_attention_gpu.py \
  -k "split_counts or against_reference or errors or bad_arguments"
tail -1 $R/tests.txt; grep FAILED $R/tests.txt | head; snap
t moe 60 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --variants fp8route,fp8route:block --no-prefetch \
  --json $R/moe.json
grep -h "batch" $R/moe.txt; snap
FP8ROUTE_FFI_LIB=$TRACE t moe_trace 60 python3 bench/moe_e2e.py --mode layer --batches 1,8 --variants fp8route \
  --no-prefetch --trace --json $R/moe_trace.json
grep -E "grouped|block \(" $R/moe_trace.txt | head -20; snap
t e2e 120 python3 bench/e2e.py --prefill none --iters 30 --models llama-3.1-8b,llama-3.1-70b-tp8 --batches 1,8,32 \
  --variants fp8route --no-prefetch --json $R/e2e.json
grep -h "tok/s" $R/e2e.txt | grep -v "(tok/s"; snap
FP8ROUTE_FFI_LIB=$TRACE t chain 60 python3 bench/decode_chain.py --models llama-3.1-8b,llama-3.1-70b-tp8 --layers 8 \
  --ring own --empty 0 --json $R/chain.json
grep -E "attention|o_proj|layer \(" $R/chain.txt | head -20; snap
cat $R/rc.txt
