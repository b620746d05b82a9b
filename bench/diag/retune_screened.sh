#!/usr/bin/env bash
# The whole shipped table re-tuned with the screened method (fp8route tune's default --screen 25),
# for the GPU machine, in as many calls as it takes: each call resumes the raw files it is given.
#   bench/diag/retune_screened.sh OUT_DIR DEADLINE_S [STATE_DIR]
# STATE_DIR (default build/gpu/retune) holds h200_tp8.raw.jsonl and h200_tp1.raw.jsonl: carry it
# back in (gunzip the returned .raw.jsonl.gz files there) to resume. TP 8 first, then TP 1, M = the routed grid.
# Afterwards, here: bench/routing_records.py with the two raw files first (README of
# bench/results/2026-11-30-tune-h200 has the --older chain), FP8ROUTE_WRITE_TABLE=1 test_route,
# then bench/diag/routed_models.sh per TP degree.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$1"; deadline=$(( $(date +%s) + $2 )); state="${3:-$root/build/gpu/retune}"
mkdir -p "$out" "$state"
export FP8ROUTE_SOURCE_DIR="$root"
for tp in 8 1; do
  left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 10 ] || break
  echo "== tune tp $tp ($(date +%T), ${left} s left)" >> "$out/tune.txt"
  timeout "$left" "$root/build/gpu/fp8route" tune --model all --tp "$tp" --m 1,4,16,32,64,128,256,512,1024,4096 \
    -o "$state/h200_tp$tp.json" >> "$out/tune.txt" 2>&1
  echo "rc=$? $(date +%T)" >> "$out/tune.txt"
done
for f in "$state"/*.raw.jsonl; do [ -f "$f" ] && gzip -c "$f" > "$out/$(basename "$f").gz"; done
grep -h "^wrote\|resuming" "$out/tune.txt"
