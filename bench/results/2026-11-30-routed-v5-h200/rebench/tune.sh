#!/usr/bin/env bash
# Tune each listed problem (tp n k scale m) alone, with the fill-in tune's settings (instances 2 for
# M <= 192, else 1; screen 25, final 5 with 4 instances), then with --instances 4 throughout.
out="$1"; mkdir -p "$out/tune"; export FP8ROUTE_SOURCE_DIR=$PWD
while read tp n k s m; do
  echo "$n $k rebench" > /tmp/shape.txt
  inst=1; [ "$m" -le 192 ] && inst=2
  for mode in fill i4; do
    [ $mode = i4 ] && inst=4
    timeout 60 build/gpu/fp8route tune --shapes /tmp/shape.txt --tp 1 --m $m --scale $s --instances $inst --fresh \
      -o "$out/tune/${mode}_${n}_${k}_${s}_${m}.json" >> "$out/tune.txt" 2>&1 || echo "rc=$? $mode $n $k $s $m" >> "$out/tune.txt"
  done
done < build/rebench/misses.txt
tar -C "$out" -czf "$out/tune.tar.gz" tune && rm -rf "$out/tune"
