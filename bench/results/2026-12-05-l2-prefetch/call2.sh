#!/bin/bash
# Device call (at most 420 s). Carry .stage/r16.tar.xz (new/: the tvm-ffi wheel and the Python module with the L2 prefetches,
# release and chain-trace builds: the grouped decode GEMM streaming the next GEMM's weight, the
# attention streaming o_proj's). Tests, then each prefetch against the same model without it in
# one process (interleaved): MoE blocks (bench/moe_e2e.py --no-prefetch), Llama decode
# (bench/e2e.py --no-prefetch), and the chain traces. Outputs: $OUT/l2b.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/l2b B=$PWD/build/gpu
mkdir -p $R /tmp/site build/gpu
nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
tar xJf .stage/r16.tar.xz -C build/gpu
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/new/apache_tvm_ffi-*.whl > /dev/null 2>&1
NEW=$B/new/python.so TRACE=$B/new/trace.so
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_FFI_LIB=$NEW
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/l2b.tgz -C /tmp l2b; }
t tests 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe.py tests/python/test_moe_models.py \
  tests/python/test_attention_gpu.py
tail -1 $R/tests.txt; grep FAILED $R/tests.txt | head; snap
t moe 60 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --variants fp8route,fp8route:block --no-prefetch \
  --json $R/moe.json
grep -h "batch" $R/moe.txt; snap
FP8ROUTE_FFI_LIB=$TRACE t moe_trace 60 python3 bench/moe_e2e.py --mode layer --batches 1,8 --variants fp8route \
  --no-prefetch --trace --json $R/moe_trace.json
grep -E "grouped|block \(" $R/moe_trace.txt | head -20; snap
for m in qwen3-235b-a22b-ep8 mixtral-8x7b; do
  t moe_$m 50 python3 bench/moe_e2e.py --mode layer --model $m --moe-layers 4 --batches 1,8 --variants fp8route \
    --no-prefetch --json $R/moe_$m.json
  grep -h "batch" $R/moe_$m.txt; snap
done
t e2e 120 python3 bench/e2e.py --prefill none --iters 30 --models llama-3.1-8b,llama-3.1-70b-tp8 --batches 1,8,32 \
  --variants fp8route --no-prefetch --json $R/e2e.json
grep -h "tok/s" $R/e2e.txt | grep -v "(tok/s"; snap
FP8ROUTE_FFI_LIB=$TRACE t chain 60 python3 bench/decode_chain.py --models llama-3.1-8b,llama-3.1-70b-tp8 --layers 8 \
  --ring own --empty 0 --json $R/chain.json
grep -E "attention|o_proj|layer \(" $R/chain.txt | head -20; snap
cat $R/rc.txt
