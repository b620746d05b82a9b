#!/bin/bash
# Planned, not yet run: two calls of at most 600 s each, `STEPS=a` then `STEPS=b` (default both, for a
# machine that stays warm). Carry .stage/precise.tar.xz, a release build of the commit that adds
# cuBLASLt's `precise` configs, packed by
#   FP8ROUTE_STAGE="tools tests python" FP8ROUTE_STAGE_TOOLS=fp8route \
#   FP8ROUTE_STAGE_TESTS="test_accum test_gemm" FP8ROUTE_STAGE_PACK=.stage/precise.tar.xz scripts/stage_gpu.sh
# and, for step b's chain trace, the Python module built with -DFP8ROUTE_CHAIN_TRACE=ON (as
# ../2026-12-05-decode-chain-h200/stage.sh builds it) added to the archive as gpu/trace/_fp8route_ffi.so.
# a1. correctness: test_accum (all), test_gemm's cuBLASLt and element-alignment suites, and the Python
#     test that cublaslt/precise equals torch._scaled_mm(use_fast_accum=False) bit for bit;
# a2. (H200 only) the tensor-scale M <= 64 re-tune of every catalog model at TP 1 with the new configs
#     among the candidates, the table rebuilt, the main job twice, every catalog tensor problem
#     against torch._scaled_mm (#43 item 5);
# b1. (H200 only) the grouped table re-tuned with the narrowed every-expert-full check, and the
#     Qwen3-30B-A3B MoE block with the H100 table and with the new one (#45: ship the better);
# b2. (H200 only) the decode chain trace of Llama-3.1-8B and the 70B TP-8 rank at batch 1: each
#     kernel's boundary and each GEMM's time above its weight read (#46), if the trace module is staged.
# Outputs: $OUT/precise.tgz after each step. Bring back the raw tune file and manifest edit of a2
# (rebuild routes/h200.json on the CPU machine) and, if it wins, the grouped table of b1.
set -u
cd "$(dirname "$0")/../../.."
nvidia-smi -L > /tmp/gpu.txt 2>&1
W=$PWD R=/tmp/precise B=$PWD/build/gpu
mkdir -p $R /tmp/site build && cp /tmp/gpu.txt $R/
tar xJf .stage/precise.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_CLI=$B/fp8route \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/precise.tgz -C /tmp precise; }
STEPS=${STEPS:-a b}
if [[ $STEPS == *a* ]]; then
  t test_accum 60 $B/tests/test_accum; tail -2 $R/test_accum.txt
  t test_gemm 120 $B/tests/test_gemm --gtest_filter='GemmBackends.DescribeNamesCuBlasLtAlgorithms:GemmBackends.AllConfigsExactOnSmallIntegers:GemmBackends.ElementAlignedScalesAndBiasRunOnFastBackends:GemmBackends.DeterministicAndGraphCapturable'
  tail -2 $R/test_gemm.txt
  t pytest_precise 60 python3 -m pytest -q tests/python/test_accum.py; tail -2 $R/pytest_precise.txt; snap
fi
grep -q H200 /tmp/gpu.txt || { cat /tmp/gpu.txt; exit 3; }
if [[ $STEPS == *a* ]]; then
  D=routes/h200-sources/$(date +%F)-retune-tensor-precise-h200; mkdir -p $D
  t tune 150 $B/fp8route tune --model all --tp 1 --m 1,2,4,8,16,24,32,48,64 --scale tensor \
    -o $R/retune_tensor.json --raw $R/retune_tensor.raw.jsonl
  gzip -c $R/retune_tensor.raw.jsonl > $D/retune_tensor.raw.jsonl.gz; cp $D/retune_tensor.raw.jsonl.gz $R/
  D=$D python3 - <<'PY'
import json, os
p = "routes/h200.sources.json"; s = open(p).read()
group = ('{"about": "every catalog shape at TP 1, M = 1-64, tensor scales, every backend (cuBLASLt precise '
         'configs among them), the final round with 16 graph instances",\n "files": [\n  "' +
         os.environ["D"].removeprefix("routes/") + '/retune_tensor.raw.jsonl.gz"]},\n')
i = s.index('"groups": [\n') + len('"groups": [\n'); s = s[:i] + group + s[i:]
json.loads(s); open(p, "w").write(s); open("/tmp/precise/h200.sources.json", "w").write(s)
PY
  t table 60 $B/fp8route table build routes/h200.sources.json -o routes/h200.json --records routes/h200-measurements.json
  grep -c '"precise' routes/h200.json; snap
  for i in 1 2; do t main$i 60 $B/fp8route; grep -hE "problems: routed" $R/main$i.txt; snap; done
  t torch_tensor 60 python3 bench/python_bench.py --model all --ops tensor --m 1,4,16,64,256,1024 --json $R/torch_tensor.json
  tail -6 $R/torch_tensor.txt; snap
fi
if [[ $STEPS == *b* ]]; then
  t tune_grouped 90 python3 -m fp8route.tune_grouped --out $R/h200-grouped.json; snap
  for table in routes/h100-grouped.json $R/h200-grouped.json; do
    echo "== FP8ROUTE_GROUPED_TABLE=$table" >> $R/moe_layer.txt
    FP8ROUTE_GROUPED_TABLE=$table t moe_layer 45 python3 bench/moe_e2e.py --mode layer --batches 1,8,32
  done
  grep "==\|batch" $R/moe_layer.txt; snap
  if [ -f $B/trace/_fp8route_ffi.so ]; then
    FP8ROUTE_FFI_LIB=$B/trace/_fp8route_ffi.so t chain 120 python3 bench/decode_chain.py \
      --models llama-3.1-8b,llama-3.1-70b-tp8 --layers 8 --ring own --json $R/chain.json
    grep -E "^layer|ring own" $R/chain.txt; snap
  fi
fi
cat $R/rc.txt
