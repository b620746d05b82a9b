#!/usr/bin/env bash
# One GPU call: re-tune the decode problems (M = 1, 4, 16; TP 1 and 8; every model, scale and
# backend) with today's kernels (the shipped table predates skinny v2), rebuild routes/h200.json
# with that run first and the earlier tunes filling in the rest (README: "The shipped table is
# rebuilt ..."), then bench two models against every config alone, 4 graph instances per candidate.
# Staged: build/gpu/fp8route and build/gpu/tests/test_route (scripts/stage_gpu.sh).
#   bench/diag/retune_decode.sh OUT_DIR
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$1"; mkdir -p "$out/json"
export FP8ROUTE_SOURCE_DIR="$root"
res="$root/bench/results/2026-11-30-tune-h200"
raw=/tmp/tune_decode.raw.jsonl
timeout 260 "$root/build/gpu/fp8route" tune --model all --tp 1,8 --m 1,4,16 -o /tmp/tune_decode.json --raw "$raw" \
  > "$out/tune_decode.txt" 2>&1
echo "tune rc=$? $(date +%T)" >> "$out/tune_decode.txt"
gzip -c "$raw" > "$out/tune_decode.raw.jsonl.gz"
python3 "$root/bench/routing_records.py" -o "$root/routes/h200-measurements.json" "$out/tune_decode.raw.jsonl.gz" \
  --older "$res/tune_tp1_flush.raw.jsonl.gz" "$res/tune_tp8_flush.raw.jsonl.gz" \
  --older "$res/tune_tp1_tp8.raw.jsonl.gz" --older "$root"/bench/results/2026-11-30-decode-h200/decode_*.json \
  >> "$out/tune_decode.txt" 2>&1
FP8ROUTE_WRITE_TABLE=1 "$root/build/gpu/tests/test_route" --gtest_filter='Route.ShippedTable*' >> "$out/tune_decode.txt" 2>&1
echo "table rc=$?" >> "$out/tune_decode.txt"
cp "$root/routes/h200.json" "$root/routes/h200-measurements.json" "$out/"
for spec in "llama-3.1-8b 1 1,4,16,32,64,128,256,512,1024,4096 110" "llama-3.1-405b 8 1,4,16 80"; do
  read -r model tp m limit <<< "$spec"
  echo "== $model tp $tp, 4 instances" >> "$out/bench.txt"
  timeout "$limit" "$root/build/gpu/fp8route" bench --model "$model" --tp "$tp" --m "$m" --configs all --instances 4 \
    --json "$out/json/${model}_tp${tp}_i4.json" >> "$out/bench.txt" 2>&1
  echo "rc=$? $(date +%T)" >> "$out/bench.txt"
done
tar -C "$out" -czf "$out/json.tar.gz" json && rm -rf "$out/json"
