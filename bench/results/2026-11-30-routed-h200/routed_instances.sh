#!/usr/bin/env bash
# fp8route bench --configs all with 1 and with 4 CUDA-graph instances per candidate, side by side in
# one call on the GPU machine, for the two model/TP pairs with the most "routed > 3% slower" misses
# (llama-3.1-405b TP 8, llama-3.1-8b TP 1): does averaging over graph instances (stream-K graphs
# land at one of a few speeds per instance) remove the misses? Staged fp8route in build/gpu.
#   bench/results/2026-11-30-routed-h200/routed_instances.sh OUT_DIR
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
out="$1"; mkdir -p "$out/json"
export FP8ROUTE_SOURCE_DIR="$root"
m=1,4,16,32,64,128,256,512,1024,4096
for pair in "llama-3.1-405b 8" "llama-3.1-8b 1"; do
  read -r model tp <<< "$pair"
  for inst in 1 4; do
    name="${model}_tp${tp}_i${inst}"
    echo "== $name" >> "$out/routed_instances.txt"
    timeout 250 "$root/build/gpu/fp8route" bench --model "$model" --tp "$tp" --m "$m" --configs all \
      --instances "$inst" --json "$out/json/$name.json" >> "$out/routed_instances.txt" 2>&1
    echo "rc=$? $(date +%T)" >> "$out/routed_instances.txt"
  done
done
tar -C "$out" -czf "$out/json.tar.gz" json && rm -rf "$out/json"
