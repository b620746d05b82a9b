#!/usr/bin/env python3
"""Rules for choosing a grouped backend at rows between two measured rows of a grouped routing table,
compared on measured tables: each interior measured rows of each entry held out and routed from its
neighbours (a backend counts as able to run the problem when it was measured there). `ceil`: the
ranking at the smallest measured rows above (the library's rule before); `floor`: the largest below;
`linear`: each backend measured at both by its time interpolated linearly in rows, then the rest at
the upper (the library's rule now); `linear, decode in 8-row tiles`: the same with the decode
backend's time stepping with ceil(rows / 8).

  python3 bench/results/2026-12-05-interpolation-cpu/grouped_rows.py TABLE.json [TABLE.json ...]
"""
import json
import math
import sys


def rank(times, truth):
    for backend in sorted(times, key=times.get):
        if backend in truth:
            return truth[backend]
    return None


for path in sys.argv[1:]:
    table = json.load(open(path))
    res = {"ceil": [], "floor": [], "linear": [], "linear, decode in 8-row tiles": []}
    for e in table["entries"]:
        by = {}
        for rows, backend, us in e["measured"]:
            by.setdefault(rows, {})[backend] = us
        rs = sorted(by)
        for i in range(1, len(rs) - 1):
            r, lo, hi = rs[i], rs[i - 1], rs[i + 1]
            truth = by[r]
            best = min(truth.values())
            up, down = rank(by[hi], truth), rank(by[lo], truth)
            if up is None or down is None:
                continue
            res["ceil"].append(up / best)
            res["floor"].append(down / best)
            for name, tiles in (("linear", False), ("linear, decode in 8-row tiles", True)):
                def w(backend):
                    f = lambda v: math.ceil(v / 8)
                    if tiles and backend == "decode" and f(hi) > f(lo):
                        return (f(r) - f(lo)) / (f(hi) - f(lo))
                    return (r - lo) / (hi - lo)
                est = {b: (1 - w(b)) * by[lo][b] + w(b) * by[hi][b] for b in by[lo] if b in by[hi]}
                got = rank(est, truth) if est else None
                res[name].append((got if got is not None else up) / best)
    for name, v in res.items():
        g = math.exp(sum(map(math.log, v)) / len(v))
        print(f"{path.split('/')[-1]:18} {name:30} {len(v)} points, geomean loss {100 * (g - 1):.2f}%, "
              f"{sum(x > 1.03 for x in v)} lose > 3%, worst {100 * (max(v) - 1):.1f}%")
