#!/usr/bin/env bash
# explain (with cuBLASLt algorithms named) for each listed problem, in two separate processes per problem.
out="$1"; mkdir -p "$out"; export FP8ROUTE_SOURCE_DIR=$PWD
for rep in 1 2; do
  while read tp n k s m; do
    echo "== $n $k $s $m" >> "$out/explain_$rep.txt"
    build/gpu/fp8route explain --m $m --n $n --k $k --scale $s >> "$out/explain_$rep.txt" 2>&1
  done < build/rebench/misses.txt
done
