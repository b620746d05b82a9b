#!/usr/bin/env bash
# fp8route bench --configs all --instances 4 over every model at TP 8 and TP 1, M = 1, 4, 16 (the
# decode problems retune_decode.sh re-tuned), in one call on the GPU machine. Staged fp8route.
#   bench/results/2026-11-30-routed-h200/routed_decode_all.sh OUT_DIR
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
out="$1"; mkdir -p "$out/json"
export FP8ROUTE_SOURCE_DIR="$root"
for tp in 8 1; do
  echo "== all models tp $tp, M 1,4,16, 4 instances" >> "$out/bench.txt"
  timeout 125 "$root/build/gpu/fp8route" bench --model all --tp "$tp" --m 1,4,16 --configs all --instances 4 \
    --json "$out/json/all_tp${tp}_decode_i4.json" >> "$out/bench.txt" 2>&1
  echo "rc=$? $(date +%T)" >> "$out/bench.txt"
done
tar -C "$out" -czf "$out/json.tar.gz" json && rm -rf "$out/json"
