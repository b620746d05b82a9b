#!/bin/bash
# Device call (at most 560 s). Carry .stage/r10.tar.xz: build/gpu with the Python module of the
# working tree (release). The MoE glue GPU tests (routing, dispatch, scatter, combine), then each
# decode glue kernel of prof.py under Nsight Compute (full set, source counters): its details page
# and the per-instruction (SASS) stall samples, one kernel per report. Outputs: $OUT/prof.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/prof B=$PWD/build/gpu P=bench/results/2026-12-05-decode-cluster/prof.py
mkdir -p $R /tmp/site build
nvidia-smi > $R/nvidia-smi.txt 2>&1; head -12 $R/nvidia-smi.txt | grep -E "H100|H200"
tar xJf .stage/r10.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/prof.tgz -C /tmp prof; }
t glue_tests 100 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe_glue_gpu.py
tail -2 $R/glue_tests.txt; snap
t plain 60 python3 $P
# name:kernel regex:launches to skip (the first of each kind is a warm-up)
for spec in attn:decode_attention:2 silu1:per_token_quant_cluster:2 silu17:per_token_quant_kernel:2 \
            oquant:per_token_quant_kernel:6 route:route_masked_dispatch:2 scatter:per_token_quant_kernel:10 \
            combine:combine_kernel:2; do
  IFS=: read name kern skip <<< "$spec"
  t ncu_$name 75 ncu --clock-control none --set full --import-source no -k regex:$kern --launch-skip $skip \
    --launch-count 1 -f -o $R/$name python3 $P
  ncu -i $R/$name.ncu-rep --page details --csv > $R/${name}_details.csv 2>&1
  ncu -i $R/$name.ncu-rep --page source --csv --print-source sass > $R/${name}_sass.csv 2>&1
  rm -f $R/$name.ncu-rep; grep -h "Duration" $R/${name}_details.csv | head -1; snap
done
cat $R/rc.txt
