#!/usr/bin/env bash
# Re-bench each listed problem (tp n k scale m) twice, one fp8route bench per problem and repeat.
out="$1"; mkdir -p "$out/json"; export FP8ROUTE_SOURCE_DIR=$PWD
for rep in ${REPS:-1 2}; do
  while read tp n k s m; do
    echo "$n $k rebench" > /tmp/shape.txt
    timeout 60 build/gpu/fp8route bench --shapes /tmp/shape.txt --tp 1 --m $m --scale $s --configs all --instances 4 --screen 25 \
      --json "$out/json/r${rep}_${n}_${k}_${s}_${m}.json" >> "$out/rebench.txt" 2>&1 || echo "rc=$? $n $k $s $m" >> "$out/rebench.txt"
  done < build/rebench/misses.txt
done
tar -C "$out" -czf "$out/rebench.json.tar.gz" json && rm -rf "$out/json"
