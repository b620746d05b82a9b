#!/usr/bin/env bash
# Call 1 (fifteenth session): re-tune the problems recurring_misses.py flagged, rebuild the shipped
# table with their raw files first in the chain, bench TP 8 (all six models) and part of TP 1 with it.
set -uo pipefail
start=$(date +%s); left() { echo $(( start + $1 - $(date +%s) )); }
W=$OUT/w; mkdir -p $W/tune; cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
export FP8ROUTE_SOURCE_DIR=$PWD
nvidia-smi -L > $W/gpu.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.sw_power_cap --format=csv -l 1 > $W/smi.csv 2>&1 &
smi=$!
T=build/gpu/fp8route
tn() { local name=$1; shift; $T tune "$@" -o $W/tune/$name.json --raw $W/tune/$name.raw.jsonl >> $W/tune/tune.txt 2>&1; echo "$name rc=$? $(date +%T)" >> $W/tune/tune.txt; }
tn r1 --model llama-3.1-405b --tp 1 --m 3072 --scale tensor --instances 1
tn r2 --model llama-3.1-405b --tp 8 --m 1,2,8 --scale block,row --instances 2
tn r3 --model llama-3.1-70b --tp 1 --m 16 --scale block,row --instances 2
tn r4 --model llama-3.1-70b --tp 1 --m 768 --scale block,row --instances 1
tn r5 --model llama-3.1-8b --tp 1 --m 1536 --scale block --instances 1
tn r6 --model minimax-h3-like --tp 1 --m 96 --scale block --instances 2
tn r7 --model qwen2.5-72b --tp 1 --m 768 --scale row --instances 1
echo "tune done at $(( $(date +%s) - start )) s" >> $W/tune/tune.txt
R=bench/results
python3 bench/routing_records.py -o routes/h200-measurements.json $W/tune/r?.raw.jsonl \
    --older $R/2026-11-30-tp18-v6-h200/call4/t1.raw.jsonl.gz $R/2026-11-30-tp18-v6-h200/call4/t8.raw.jsonl.gz \
    --older $R/2026-11-30-routed-v4-h200/tune_tp8_fill.raw.jsonl.gz $R/2026-11-30-routed-v4-h200/tune_tp1_fill.raw.jsonl.gz \
    $R/2026-11-30-routed-v3-h200/tune_tp8_screened.raw.jsonl.gz $R/2026-11-30-routed-v3-h200/tune_tp1_screened.raw.jsonl.gz \
    --older $R/2026-11-30-routed-v2-h200/screened_tune/screened.raw.jsonl.gz \
    --older $R/2026-11-30-tune-h200/tune_decode.raw.jsonl.gz \
    --older $R/2026-11-30-tune-h200/tune_tp1_flush.raw.jsonl.gz $R/2026-11-30-tune-h200/tune_tp8_flush.raw.jsonl.gz \
    --older $R/2026-11-30-tune-h200/tune_tp1_tp8.raw.jsonl.gz \
    --older $R/2026-11-30-tp24-h200/tune_tp4.raw.jsonl.gz \
    --older $R/2026-11-30-tp24-h200/tune_tp2.raw.jsonl.gz \
    --older $R/2026-11-30-decode-h200/decode_*.json.gz > $W/rebuild.txt 2>&1
FP8ROUTE_WRITE_TABLE=1 build/gpu/tests/test_route --gtest_filter=Route.ShippedTable* >> $W/rebuild.txt 2>&1
echo "rebuild rc=$?" >> $W/rebuild.txt
mkdir -p $W/table && cp routes/h200.json routes/h200-measurements.json $W/table/ && md5sum routes/h200.json > $W/table_md5.txt
M=1,2,8,16,24,48,96,192,384,768,1536,3072
FP8ROUTE_BENCH_ARGS="--screen 25" TAG=tp8 bench/results/2026-11-30-routed-v2-h200/routed_models.sh $W/tp8 8 $M $(( $(left 585) - 170 ))
FP8ROUTE_BENCH_ARGS="--screen 25" TAG=tp1 bench/results/2026-11-30-routed-v2-h200/routed_models.sh $W/tp1a 1 $M $(left 585) llama-3.1-8b minimax-h3-like deepseek-v3
kill $smi; gzip $W/smi.csv; gzip $W/tune/*.raw.jsonl
tar -C $OUT -czf $OUT/call1.tar.gz w && rm -rf $W
