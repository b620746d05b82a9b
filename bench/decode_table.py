#!/usr/bin/env python3
"""Decode figures of the small-M issue from gemm_bench JSON made with --floor:
skinny against the best of cuBLASLt and CUTLASS, skinny against the weight-read floor on layers
whose weight is >= 32 MB, our best against cuBLASLt, and the single config closest to the
per-shape best in each M band (the default rule's candidates).

  python3 bench/decode_table.py decode_tp12.json decode_tp48.json decode_tb.json   (or .json.gz)
"""
import gzip
import json
import math
import sys
from collections import defaultdict


def gm(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


rows = [r for path in sys.argv[1:] for r in json.load((gzip.open if path.endswith(".gz") else open)(path, "rt"))]
best = defaultdict(dict)       # (scale, n, k, m) -> backend -> fastest record
by_config = defaultdict(dict)  # (scale, n, k, m) -> (backend, config) -> us
for r in rows:
    key = (r["scale"], r["n"], r["k"], r["m"])
    by_config[key][(r["backend"], r["config"])] = r["us"]
    if r["backend"] not in best[key] or r["us"] < best[key][r["backend"]]["us"]:
        best[key][r["backend"]] = r

for scale in ("row", "tensor", "block"):
    for band, lo, hi in (("M<=16", 1, 16), ("M 32-64", 32, 64)):
        sk, fl, cu = [], [], []
        for (s, n, k, m), d in best.items():
            if s != scale or not lo <= m <= hi or "skinny" not in d:
                continue
            sk.append(min(d[b]["us"] for b in ("cublaslt", "cutlass_sm90") if b in d) / d["skinny"]["us"])
            ours = min(d[b]["us"] for b in ("cutlass_sm90", "skinny"))
            if "cublaslt" in d:
                cu.append(d["cublaslt"]["us"] / ours)
            if n * k >= 32e6 and "floor" in d:
                fl.append(d["floor"]["us"] / d["skinny"]["us"])
        if sk:
            print(f"{scale:6} {band:8} problems {len(sk):4}: skinny / best(cuBLASLt, CUTLASS) geomean {gm(sk):.3f} "
                  f"(min {min(sk):.2f}, max {max(sk):.2f}, skinny faster on {sum(s > 1 for s in sk)}); "
                  f"best of ours / cuBLASLt {gm(cu):.3f}; floor / skinny on >= 32 MB weights geomean {gm(fl):.3f}, "
                  f"{sum(f >= 0.85 for f in fl)} of {len(fl)} within 1/0.85")

print("\nrow scales: the single config closest to the per-shape best (geomean of best/config, min)")
for band, lo, hi in (("M 1-8", 1, 8), ("M 16", 16, 16), ("M 32", 32, 32), ("M 64", 64, 64)):
    keys = [k for k in by_config if k[0] == "row" and lo <= k[3] <= hi]
    if not keys:
        continue
    cands = {c for k in keys for c in by_config[k] if c[0] != "floor"}
    scored = []
    for c in cands:
        v = [min(t for cc, t in by_config[k].items() if cc[0] != "floor") / by_config[k][c] for k in keys if c in by_config[k]]
        if len(v) == len(keys):
            scored.append((gm(v), min(v), c))
    for g, mn, c in sorted(scored, reverse=True)[:3]:
        print(f"  {band:6} {g:.3f} (min {mn:.2f}) {c[0]}/{c[1]}")
