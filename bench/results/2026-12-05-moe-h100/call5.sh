#!/bin/bash
# Device call (at most 300 s; carry .stage/moe.tar.xz unpacked into build/ first): the two tests
# rewritten after calls 1-4 (the masked block-scale test's per-output bound; the unique_rows test
# comparing scale buffers bit for bit), the split-count test on the build without the run-ahead
# reduction, then the grouped routing table (fp8route.tune_grouped, block and row scales, Qwen3-30B-A3B
# and DeepSeek-V3 first, --resume). Outputs in $OUT/call5.tgz after each step.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/call5 B=$PWD/build/gpu
mkdir -p $R /tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" >> $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/call5.tgz -C /tmp call5; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
t tests 45 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe.py tests/python/test_moe_glue_gpu.py \
  -k "masked_block_matches or split_counts or unique_rows_is_the_default"
tail -3 $R/tests.txt; snap
t tune ${TUNE_S:-220} python3 -m fp8route.tune_grouped --out $R/grouped.json --resume --scales block,row \
  --models qwen3-30b-a3b,deepseek-v3
tail -3 $R/tune.txt; snap
