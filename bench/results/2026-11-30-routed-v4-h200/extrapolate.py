#!/usr/bin/env python3
"""How well the fastest config at a smaller measured M routes M = 4096, on the shipped table's H200
measurements: the router's rule above an entry's largest measured M (the catalog's M = 6144-16384
are routed from 4096 that way: a step of 1.5-4x). cuBLASLt's heuristic1..3 do not carry across M
(route.h), so they are not candidates, but they count as the best at 4096.
Run from the repository root: python3 bench/results/2026-11-30-routed-v4-h200/extrapolate.py"""
import collections, json, math, re

t = collections.defaultdict(dict)
for s, o, n, k, m, b, c, us in json.load(open("routes/h200-measurements.json")):
    t[(s, o, n, k)].setdefault(m, {})[(b, c)] = us
for lo in (3072, 2048, 1024):
    logs, over3, over10, worst = [], 0, 0, 1
    for ms in t.values():
        if lo not in ms or 4096 not in ms:
            continue
        at_lo = {bc: u for bc, u in ms[lo].items() if not re.match(r"heuristic\d", bc[1]) and bc in ms[4096]}
        r = ms[4096][min(at_lo, key=at_lo.get)] / min(ms[4096].values())
        logs.append(math.log(r))
        over3, over10, worst = over3 + (r > 1.03), over10 + (r > 1.10), max(worst, r)
    print(f"M = 4096 routed by the fastest at {lo}: {len(logs)} entries, geomean loss "
          f"{100 * (math.exp(sum(logs) / len(logs)) - 1):.2f}%, > 3%: {over3}, > 10%: {over10}, worst {worst:.3f}x")
