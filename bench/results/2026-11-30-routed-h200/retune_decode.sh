#!/usr/bin/env bash
# One GPU call: re-tune the decode problems (M = 1, 4, 16; TP 1 and 8; every model, scale and
# backend) with today's kernels (the shipped table predates skinny v2), build routes/h200.json's
# successor into OUT_DIR with that run first and the shipped table's runs filling in the rest
# (docs/routing.md, "The shipped table"), then bench two models against every config alone, 4 graph
# instances per candidate.
# Staged: build/gpu/fp8route (scripts/stage_gpu.sh).
#   bench/results/2026-11-30-routed-h200/retune_decode.sh OUT_DIR
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
out="$1"; mkdir -p "$out/json"
export FP8ROUTE_SOURCE_DIR="$root"
raw=/tmp/tune_decode.raw.jsonl
timeout 260 "$root/build/gpu/fp8route" tune --model all --tp 1,8 --m 1,4,16 -o /tmp/tune_decode.json --raw "$raw" \
  > "$out/tune_decode.txt" 2>&1
echo "tune rc=$? $(date +%T)" >> "$out/tune_decode.txt"
gzip -c "$raw" > "$out/tune_decode.raw.jsonl.gz"
# The shipped table's manifest with this run as its first group (paths made absolute); the table and
# its records built from it go to OUT_DIR, beside the manifest to commit once the raw file is moved
# into bench/results.
python3 - "$root/routes/h200.sources.json" "$out/tune_decode.raw.jsonl.gz" > "$out/h200.sources.json" <<'PY'
import json, os, sys
manifest = json.load(open(sys.argv[1]))
base = os.path.dirname(os.path.abspath(sys.argv[1]))
for group in manifest["groups"]:
    group["files"] = [os.path.normpath(os.path.join(base, f)) for f in group["files"]]
manifest["groups"].insert(0, {"about": "decode re-tune", "files": [os.path.abspath(sys.argv[2])]})
json.dump(manifest, sys.stdout, indent=1)
PY
"$root/build/gpu/fp8route" table build "$out/h200.sources.json" -o "$out/h200.json" \
  --records "$out/h200-measurements.json" >> "$out/tune_decode.txt" 2>&1
echo "table rc=$?" >> "$out/tune_decode.txt"
for spec in "llama-3.1-8b 1 1,4,16,32,64,128,256,512,1024,4096 110" "llama-3.1-405b 8 1,4,16 80"; do
  read -r model tp m limit <<< "$spec"
  echo "== $model tp $tp, 4 instances" >> "$out/bench.txt"
  timeout "$limit" "$root/build/gpu/fp8route" bench --model "$model" --tp "$tp" --m "$m" --configs all --instances 4 \
    --json "$out/json/${model}_tp${tp}_i4.json" >> "$out/bench.txt" 2>&1
  echo "rc=$? $(date +%T)" >> "$out/bench.txt"
done
tar -C "$out" -czf "$out/json.tar.gz" json && rm -rf "$out/json"
