#!/usr/bin/env bash
# The shipped table's TP 8 and TP 1 problems re-tuned with the screened method (fp8route tune's
# default --screen 25), for the GPU machine, in as many calls as it takes: each call resumes the raw
# files it is given.
#   bench/results/2026-11-30-routed-v2-h200/retune_screened.sh OUT_DIR DEADLINE_S [STATE_DIR]
# STATE_DIR (default build/gpu/retune) holds h200_tpT.raw.jsonl: carry it back in (gunzip the
# returned .raw.jsonl.gz files there) to resume. Per TP degree (RETUNE_TP, default "8 1"): the M
# values of RETUNE_M_SMALL (default 32,64,128,256) with --instances 2 (stream-K configs run at one of
# two speeds per graph instance, and they win at these M), then RETUNE_M_LARGE (default
# 512,1024,4096) with one instance; both into one raw file, so the second run's table holds both.
# tune's defaults apply otherwise (--screen 25, --final 5 with 4 instances since 06750a4). The M the
# table lacked until the eighth session (the catalog's other M up to 3072; bench/results/2026-11-30-routed-v4-h200):
#   RETUNE_M_SMALL=2,8,24,48,96,192 RETUNE_M_LARGE=384,768,1536,2048,3072 bench/results/2026-11-30-routed-v2-h200/retune_screened.sh ...
# TP 2 and 4 at every catalog M up to 4096 (thirteenth session, bench/results/2026-11-30-tp24-h200;
# 2835 problems, 720 s of GPU time over two calls):
#   RETUNE_TP="4 2" RETUNE_M_SMALL=1,2,4,8,16,24,32,48,64,96,128,192,256 \
#   RETUNE_M_LARGE=384,512,768,1024,1536,2048,3072,4096 bench/results/2026-11-30-routed-v2-h200/retune_screened.sh OUT 559 build/gpu/retune24
# Afterwards, here: the raw files as the first group of routes/h200.sources.json, `fp8route table
# build` (tools/fp8route/table.cpp), then bench/results/2026-11-30-routed-v2-h200/routed_models.sh per TP degree.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
out="$1"; deadline=$(( $(date +%s) + $2 )); state="${3:-$root/build/gpu/retune}"
mkdir -p "$out" "$state"
export FP8ROUTE_SOURCE_DIR="$root"
for tp in ${RETUNE_TP:-8 1}; do
  for part in "${RETUNE_M_SMALL:-32,64,128,256} 2" "${RETUNE_M_LARGE:-512,1024,4096} 1"; do
    read -r m inst <<< "$part"
    left=$(( deadline - $(date +%s) ))
    [ "$left" -gt 10 ] || break 2
    echo "== tune tp $tp m $m instances $inst ($(date +%T), ${left} s left)" >> "$out/tune.txt"
    timeout "$left" "$root/build/gpu/fp8route" tune --model all --tp "$tp" --m "$m" --instances "$inst" \
      -o "$state/h200_tp$tp.json" >> "$out/tune.txt" 2>&1
    echo "rc=$? $(date +%T)" >> "$out/tune.txt"
  done
done
for f in "$state"/*.raw.jsonl "$state"/*.json; do [ -f "$f" ] && gzip -c "$f" > "$out/$(basename "$f").gz"; done
grep -h "^wrote\|resuming\|^rc=\|^==" "$out/tune.txt"
