#!/bin/bash
# Device call (at most 590 s). Carry .stage/moe.tar.xz (release build of 3873d28, build/gpu) and
# .stage/dg.tar.xz (DeepGEMM a5645d7 prepared as ../2026-12-05-moe-next/call3.sh says).
# On an H200: the tensor-scale re-tune of ../2026-12-05-trust-h200/call4.sh (narrowed) first.
# Elsewhere (an H100): the grouped decode cost sweep (decode_cost.py) and, where Nsight Compute may
# read the counters, a profile of one grouped decode launch (Qwen3-30B-A3B gate_up at one token).
# Then on either: DeepGEMM's grouped kernels beside fp8route's (call3.sh). Outputs: $OUT/call1.tgz.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/call1 B=$PWD/build/gpu H=bench/results/2026-12-05-moe-reference
mkdir -p $R /tmp/site build
nvidia-smi > $R/nvidia-smi.txt 2>&1
tar xJf .stage/moe.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/call1.tgz -C /tmp call1; }
if grep -q H200 $R/nvidia-smi.txt; then
  TUNE_MODELS=llama-3.1-8b,deepseek-v3 TUNE_TP=1 TUNE_S=150 timeout 400 bash bench/results/2026-12-05-trust-h200/call4.sh \
    > $R/call4.txt 2>&1; echo "call4 rc $?" >> $R/rc.txt
  cp -r /tmp/call4 $R/ 2>/dev/null; snap; DGT=150
else
DGT=300
t cost 120 python3 $H/decode_cost.py --json $R/decode_cost.json; grep fit $R/cost.txt; snap
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
[ -n "$NCU" ] && t ncu 100 $NCU -k regex:grouped_decode -s 2 -c 1 --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
  python3 $H/decode_cost.py --one 1536 2048 4
tail -5 $R/ncu.txt; snap
fi
DG_TIMEOUT=$DGT timeout $((DGT + 30)) bash bench/results/2026-12-05-moe-next/call3.sh > $R/dg_call.txt 2>&1
echo "dg rc $?" >> $R/rc.txt; cp -r /tmp/dgg $R/ 2>/dev/null; snap
cat $R/rc.txt
