#!/usr/bin/env python3
"""Rules for ranking configs at an M between two measured M, compared on the shipped measurements
(routes/h200-measurements.json): each interior measured M of each (scale, out, N, K) held out and
ranked from its two neighbouring measured M, as test_route's Route.HeldOutMInterpolates does (a
config counts as able to run the problem when it was measured there). Prints, per rule, the
geometric-mean loss against the best measured config, the points losing more than 3% and 10%, and
the worst. `current` reproduces the router before the one-sided rule (2.20%, 1047 points > 3%).

  python3 bench/results/2026-12-05-interpolation-cpu/interpolation_rules.py [MEASUREMENTS]
"""
import collections
import json
import math
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "routes", "h200-measurements.json")
T = collections.defaultdict(dict)  # (scale, out, n, k) -> {m: {(backend, config): us}}
for s, o, n, k, m, b, c, us in json.load(open(path)):
    T[(s, o, n, k)].setdefault(m, {})[(b, c)] = us
# cuBLASLt's later ranks name other algorithms at other M (router.cpp, carries_over).
NOCARRY = {("cublaslt", x) for x in ["heuristic1", "heuristic2", "heuristic3", "ws1m", "ws1m1", "precise1"]}


def m_tile(b, c):  # GemmBackend::m_tile of each backend
    if b == "cutlass_sm90":
        tm, tn, _ = map(int, re.search(r"_(\d+)x(\d+)x(\d+)_", c).groups())
        return tn if "_swapab" in c else tm
    if b in ("decode", "skinny"):
        return int(re.match(r"m(\d+)_", c).group(1))
    return 128 if b == "wgmma" else 0


def tiles(c, x):
    return math.ceil(x / m_tile(*c))


def weight(c, m, lo, hi):  # router.cpp, interpolation_weight
    if m_tile(*c) > 0 and tiles(c, hi) > tiles(c, lo):
        return (tiles(c, m) - tiles(c, lo)) / (tiles(c, hi) - tiles(c, lo))
    return (m - lo) / (hi - lo)


def current(both, m, lo, hi, tlo, thi):
    return {c: (1 - weight(c, m, lo, hi)) * tlo[c] + weight(c, m, lo, hi) * thi[c] for c in both}


def log_m(both, m, lo, hi, tlo, thi):  # linear in log M where the tiles do not step
    def w(c):
        if m_tile(*c) > 0 and tiles(c, hi) > tiles(c, lo):
            return weight(c, m, lo, hi)
        return math.log(m / lo) / math.log(hi / lo)
    return {c: (1 - w(c)) * tlo[c] + w(c) * thi[c] for c in both}


def relative(both, m, lo, hi, tlo, thi):  # each time over its M's best, interpolated in log
    blo, bhi = min(tlo[c] for c in both), min(thi[c] for c in both)
    w = (m - lo) / (hi - lo)
    return {c: (1 - w) * math.log(tlo[c] / blo) + w * math.log(thi[c] / bhi) for c in both}


def minimax(both, m, lo, hi, tlo, thi):  # the smallest worst ratio to the best at lo and hi
    blo, bhi = min(tlo[c] for c in both), min(thi[c] for c in both)
    return {c: max(tlo[c] / blo, thi[c] / bhi) for c in both}


def one_sided(both, m, lo, hi, tlo, thi):  # current, plus a config measured at one side only that
    est = current(both, m, lo, hi, tlo, thi)  # runs as many tiles at m as there (the router now)
    for side, t in ((lo, tlo), (hi, thi)):
        for c in t:
            if c not in est and c not in NOCARRY and m_tile(*c) > 0 and tiles(c, m) == tiles(c, side):
                est[c] = t[c]
    return est


RULES = {"current": current, "log M": log_m, "relative": relative, "minimax": minimax, "one-sided": one_sided}
losses = {name: [] for name in RULES}
oracle = []
for key, by_m in T.items():
    ms = sorted(by_m)
    for i in range(1, len(ms) - 1):
        m, lo, hi = ms[i], ms[i - 1], ms[i + 1]
        tlo, thi, tm = by_m[lo], by_m[hi], by_m[m]
        both = [c for c in tlo if c in thi and c not in NOCARRY]
        if not any(c in tm for c in both):
            continue
        best = min(tm.values())
        oracle.append(min(tm[c] for c in both if c in tm) / best)
        for name, rule in RULES.items():
            est = rule(both, m, lo, hi, tlo, thi)
            chosen = min((c for c in est if c in tm), key=lambda c: est[c])
            losses[name].append(tm[chosen] / best)


def line(v):
    g = math.exp(sum(map(math.log, v)) / len(v))
    return (f"{len(v)} points, geomean loss {100 * (g - 1):.2f}%, {sum(x > 1.03 for x in v)} lose > 3%, "
            f"{sum(x > 1.10 for x in v)} > 10%, worst {100 * (max(v) - 1):.1f}%")


for name, v in losses.items():
    print(f"{name:10} {line(v)}")
print(f"{'oracle':10} {line(oracle)} (the best config measured at both neighbours)")
