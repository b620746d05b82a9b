#!/bin/bash
# Planned, not yet run (about 9 minutes, at most 600 s of timeouts; the tune about 300 s on an H200): the tensor-scale M <= 64 entries tuned again with the final
# round at 16 graph instances (tune's default since bf16f4e), put first in the manifest, the table
# rebuilt there, then the main job three times and every catalog tensor problem against
# torch._scaled_mm. Carry .stage with gpu.tar.xz (build/gpu of a release build: fp8route and the
# Python module, packed with xz as call1.sh's archive). Outputs in $OUT/call4.tgz; bring back the new
# raw file into routes/h200-sources/ and the manifest edit, and rebuild the table on the CPU machine
# with `fp8route table build routes/h200.sources.json -o routes/h200.json --records routes/h200-measurements.json`.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/call4 B=$PWD/build/gpu
mkdir -p $R /tmp/site build && { [ -d build/gpu ] || tar xJf .stage/gpu.tar.xz -C build; }
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/call4.tgz -C /tmp call4; }
D=routes/h200-sources/2026-12-05-retune-tensor-h200
mkdir -p $D
# TUNE_MODELS / TUNE_TP / TUNE_S narrow the re-tune (e.g. the main job's model and DeepSeek-V3 at TP 1 in
# about a minute) where the device time left is short.
MODELS=${TUNE_MODELS:-all} TP=${TUNE_TP:-1,2,4,8}
t tune ${TUNE_S:-300} $B/fp8route tune --model $MODELS --tp $TP --m 1,2,4,8,16,24,32,48,64 --scale tensor \
  -o $R/retune_tensor.json --raw $R/retune_tensor.raw.jsonl
gzip -c $R/retune_tensor.raw.jsonl > $D/retune_tensor.raw.jsonl.gz; cp $D/retune_tensor.raw.jsonl.gz $R/
MODELS=$MODELS TP=$TP python3 - <<'PY'
import json, os
p = "routes/h200.sources.json"; s = open(p).read()
shapes = "every catalog shape" if os.environ["MODELS"] == "all" else "the shapes of " + os.environ["MODELS"]
group = ('{"about": "' + shapes + ' at TP ' + os.environ["TP"] + ', M = 1-64, tensor scales, every backend, the final round '
         'with 16 graph instances (as many as the bench re-check)",\n "files": [\n  '
         '"h200-sources/2026-12-05-retune-tensor-h200/retune_tensor.raw.jsonl.gz"]},\n')
i = s.index('"groups": [\n') + len('"groups": [\n'); s = s[:i] + group + s[i:]
json.loads(s); open(p, "w").write(s); open("/tmp/call4/h200.sources.json", "w").write(s)
PY
t table 60 $B/fp8route table build routes/h200.sources.json -o routes/h200.json --records routes/h200-measurements.json
snap
for i in 1 2 3; do t main$i 60 $B/fp8route; grep -hE "problems: routed" $R/main$i.txt; snap; done
t torch_tensor 60 python3 bench/python_bench.py --model all --ops tensor --m 1,4,16,64,256,1024 --json $R/torch_tensor.json
tail -6 $R/torch_tensor.txt; snap
