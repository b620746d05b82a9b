#!/usr/bin/env bash
# fp8route bench --configs all --instances 4, one model at a time (a JSON per model, so a call cut
# by the GPU machine's time limit keeps every model it finished), at one TP degree and M list, with
# a deadline in seconds for the whole loop. Staged fp8route in build/gpu.
#   bench/results/2026-11-30-routed-v2-h200/routed_models.sh OUT_DIR TP M_LIST DEADLINE_S [MODEL...]
# FP8ROUTE_BENCH_ARGS adds arguments (e.g. "--screen 25"); TAG names the JSON files (default tpTP).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
out="$1"; tp="$2"; m="$3"; deadline=$(( $(date +%s) + $4 )); shift 4
mkdir -p "$out/json"
export FP8ROUTE_SOURCE_DIR="$root"
models="${*:-llama-3.1-8b llama-3.1-70b llama-3.1-405b qwen2.5-72b deepseek-v3 minimax-h3-like}"
for model in $models; do
  left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 10 ] || { echo "== $model tp $tp: skipped, deadline" >> "$out/bench.txt"; continue; }
  echo "== $model tp $tp m $m, 4 instances ${FP8ROUTE_BENCH_ARGS:-} ($(date +%T))" >> "$out/bench.txt"
  timeout "$left" "$root/build/gpu/fp8route" bench --model "$model" --tp "$tp" --m "$m" --configs all \
    --instances 4 ${FP8ROUTE_BENCH_ARGS:-} --json "$out/json/${model}_${TAG:-tp$tp}.json" >> "$out/bench.txt" 2>&1
  echo "rc=$? $(date +%T)" >> "$out/bench.txt"
done
tar -C "$out" -czf "$out/json.tar.gz" json && rm -rf "$out/json"
