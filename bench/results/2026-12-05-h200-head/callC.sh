#!/bin/bash
# Device call C (H200, at most 330 s; repository root, carry .stage/h200head.tar.xz, after the tensor
# re-tune of run.sh was added to routes/): the block-scale re-tune of Llama-3.1-8B at M = 96-256, the
# table rebuilt, the main job three times.
set -u; W=$PWD B=$PWD/build/gpu R=/tmp/blk; mkdir -p $R build; tar xJf .stage/h200head.tar.xz -C build
D=routes/h200-sources/2026-12-05-retune-block-h200; mkdir -p $D
timeout 120 $B/fp8route tune --model llama-3.1-8b --tp 1 --m 96,128,160,192,224,256 --scale block -o $R/retune_block.json --raw $R/retune_block.raw.jsonl > $R/tune.txt 2>&1; echo "tune rc $?"; tail -2 $R/tune.txt
gzip -c $R/retune_block.raw.jsonl > $D/retune_block.raw.jsonl.gz; cp $D/retune_block.raw.jsonl.gz $R/
python3 - <<'PY'
p = "routes/h200.sources.json"; s = open(p).read()
group = ('{"about": "the shapes of llama-3.1-8b at TP 1, M = 96-256, block scales, every backend, the final round '
         'with 16 graph instances (as many as the bench re-check)",\n "files": [\n  '
         '"h200-sources/2026-12-05-retune-block-h200/retune_block.raw.jsonl.gz"]},\n')
i = s.index('"groups": [\n') + len('"groups": [\n'); s = s[:i] + group + s[i:]
import json; json.loads(s); open(p, "w").write(s); open("/tmp/blk/h200.sources.json", "w").write(s)
PY
timeout 30 $B/fp8route table build routes/h200.sources.json -o routes/h200.json --records routes/h200-measurements.json > $R/table.txt 2>&1; echo "table rc $?"
tar czf $OUT/blk.tgz -C /tmp blk
for i in 1 2 3; do timeout 60 env FP8ROUTE_SOURCE_DIR=$W $B/fp8route > $R/main$i.txt 2>&1; grep -h -A3 "problems: routed\|^Routed more" $R/main$i.txt | head -8; tar czf $OUT/blk.tgz -C /tmp blk; done
