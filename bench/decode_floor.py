#!/usr/bin/env python3
"""Decode GEMMs against the weight-read floor, from gemm_bench JSON made with --floor.

For each problem (scale, N, K, M): the floor (a kernel that only reads the N x K weight, timed the
same way), the fastest config of each backend, and floor / time (1.0 = at the floor). Bands by
weight size: >= 16 MB (target: floor / time >= 0.85 at M <= 16), 4-16 MB (>= 0.75), < 4 MB.

  python3 bench/decode_floor.py bench.json [more.json ...] [--backend decode] [--list]
"""
import argparse
import gzip
import json
import math
from collections import defaultdict


def gm(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--backend", default="decode", help="the backend judged against the others")
    ap.add_argument("--list", action="store_true", help="one line per problem")
    a = ap.parse_args()
    rows = [r for p in a.json for r in json.load((gzip.open if p.endswith(".gz") else open)(p, "rt"))]
    best = defaultdict(dict)  # (scale, n, k, m) -> backend -> fastest record
    for r in rows:
        key = (r["scale"], r["n"], r["k"], r["m"])
        if r["backend"] not in best[key] or r["us"] < best[key][r["backend"]]["us"]:
            best[key][r["backend"]] = r
    bands = (("M<=16, >=16 MB", 1, 16, 16e6, 1e30, 0.85), ("M<=16, 4-16 MB", 1, 16, 4e6, 16e6, 0.75),
             ("M<=16, <4 MB", 1, 16, 0, 4e6, None), ("M 17-64, >=16 MB", 17, 64, 16e6, 1e30, None),
             ("M 17-64, <16 MB", 17, 64, 0, 16e6, None))
    print(f"{'scale':6} {'band':18} {'n':>4} {'floor/' + a.backend:>12} {'floor/best':>10} {'target met':>10} "
          f"{a.backend + '/others':>14} {'faster on':>9}")
    for scale in ("tensor", "row", "block"):
        for label, mlo, mhi, blo, bhi, target in bands:
            ours, allb, vs, met = [], [], [], 0
            for (s, n, k, m), d in sorted(best.items()):
                if s != scale or not mlo <= m <= mhi or not blo <= n * k < bhi or "floor" not in d or a.backend not in d:
                    continue
                others = [d[b]["us"] for b in d if b not in ("floor", a.backend)]
                f, t = d["floor"]["us"], d[a.backend]["us"]
                ours.append(f / t)
                allb.append(f / min([t] + others))
                if others:
                    vs.append(min(others) / t)
                met += target is not None and f / t >= target
                if a.list:
                    print(f"    {s:6} n={n:6} k={k:6} m={m:3} floor {f:8.2f} {a.backend} {t:8.2f} ({d[a.backend]['config']}) "
                          f"others {min(others) if others else float('nan'):8.2f} floor/{a.backend} {f / t:.3f}")
            if ours:
                tm = f"{met}/{len(ours)}" if target is not None else "-"
                print(f"{scale:6} {label:18} {len(ours):4} {gm(ours):12.3f} {gm(allb):10.3f} {tm:>10} {gm(vs):14.3f} "
                      f"{sum(v > 1 for v in vs):9}")


if __name__ == "__main__":
    main()
