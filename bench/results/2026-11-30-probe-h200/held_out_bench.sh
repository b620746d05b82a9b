#!/usr/bin/env bash
# A model held out of the routing table, benched on the GPU: the table without the model's shapes
# (held_out_table.py), then fp8route bench --configs all --instances 4 --screen 25 of the model
# routed by that table alone (--probe off) and with the load-time probe (--probe unseen), each in
# its own run. Staged fp8route in build/gpu; a deadline in seconds for the whole loop.
#   bench/results/2026-11-30-probe-h200/held_out_bench.sh OUT_DIR TP M_LIST DEADLINE_S MODEL...
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
out="$1"; tp="$2"; m="$3"; deadline=$(( $(date +%s) + $4 )); shift 4
mkdir -p "$out/json" "$out/tables"
export FP8ROUTE_SOURCE_DIR="$root"
tool="$root/build/gpu/fp8route"
for model in "$@"; do
  python3 "$root/bench/results/2026-11-30-probe-h200/held_out_table.py" "$tool" "$out/tables/$model.json" "$model" >> "$out/bench.txt" 2>&1
  rm -f "$out/tables/$model.raw.jsonl"
  for probe in off unseen; do
    left=$(( deadline - $(date +%s) ))
    [ "$left" -gt 10 ] || { echo "== $model tp $tp probe $probe: skipped, deadline" >> "$out/bench.txt"; continue; }
    echo "== $model held out, tp $tp m $m, probe $probe ($(date +%T))" >> "$out/bench.txt"
    timeout "$left" "$tool" bench --model "$model" --tp "$tp" --m "$m" --configs all --instances 4 --screen 25 \
      --table "$out/tables/$model.json" --probe "$probe" --json "$out/json/${model}_tp${tp}_heldout_${probe}.json" \
      >> "$out/bench.txt" 2>&1
    echo "rc=$? $(date +%T)" >> "$out/bench.txt"
  done
done
tar -C "$out" -czf "$out/json.tar.gz" json tables && rm -rf "$out/json" "$out/tables"
