#!/bin/bash
# Planned device call (at most 560 s): the grouped routing table, measured (python3 -m fp8route.tune_grouped),
# then the routed default against every backend with it loaded. Carry and unpack the same archive as
# call1.sh (its python part is enough). Run it again to go on where a cut-off run stopped (--resume,
# with the earlier table carried);
# the table is in $OUT/grouped.tgz after each step. It becomes routes/h200-grouped.json or
# routes/h100-grouped.json by the GPU that ran (gpu.txt and the table's stamp say which).
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/grouped B=$PWD/build/gpu
mkdir -p $R /tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/grouped.tgz -C /tmp grouped; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
# A later call goes on from an earlier call's table: carry it as .stage/grouped.json.
[ -f .stage/grouped.json ] && cp .stage/grouped.json $R/grouped.json
# 1. Block and row scales first (the FP8 checkpoints' kinds), then tensor; decode-sized rows before prefill.
t tune 200 python3 -m fp8route.tune_grouped --out $R/grouped.json --resume --scales block,row --forms masked
snap
t tune 200 python3 -m fp8route.tune_grouped --out $R/grouped.json --resume --scales block,row --forms contiguous
snap
t tune 100 python3 -m fp8route.tune_grouped --out $R/grouped.json --resume --scales tensor
tail -5 $R/tune.txt; snap
# 2. The routed default with the table loaded, beside each backend (moe_bench's "default" column).
FP8ROUTE_GROUPED_TABLE=$R/grouped.json t bench_routed 60 python3 bench/moe_bench.py \
  --layers qwen3_30b_a3b.gate_up,deepseek_v3.down --m 1,4,16 --active 8 --prefill 512 --scales row,block \
  --json $R/bench_routed.json
tail -20 $R/bench_routed.txt; snap
