#!/usr/bin/env python3
"""Offline evaluation of automatic probing between probed M, on the recorded H200 measurements.

Each catalog model is held out of the table (as test_route's HeldOut* tests do); its shapes are
"probed" at a grid G: the probe's timings are the recorded times (routes/h200-measurements.json) of
the configs Router::probe_candidates would time at each M of G (the held-out router's top guesses,
each backend's probe_configs, the heuristic's choice; dumped from the C++ router by the
bench program probe_dump, bench/probe_dump.cpp). Every recorded M not in G (between G's ends) is
then routed by a between-M rule from those timings and compared with the best recorded time at that M.

  build/release/probe_dump -o /tmp/dump.json
  python3 bench/autoprobe_between_m.py /tmp/dump.json

The "current" rule is the router's (router.cpp interpolated(): configs measured at both neighbours,
interpolated in tiles along M or linearly; cuBLASLt heuristicN not carried; then the upper M's
ranking). The others are alternatives evaluated for docs/routing.md.
"""
import sys, os, re
import json, math, collections, sys
D = json.load(open(sys.argv[1] if len(sys.argv) > 1 else '/tmp/dump.json'))
tiles = D['tiles']
meas = collections.defaultdict(dict)  # (scale,n,k,m) -> {cfg: us}
for s,o,n,k,m,b,c,us in json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'routes', 'h200-measurements.json'))):
    d = meas[(s,n,k,m)]; key=b+'/'+c
    d[key] = min(us, d.get(key, 1e99))
pts = {}
for p in D['points']:
    pts[(p['model'], p['scale'], p['n'], p['k'], p['m'])] = p
shapes = sorted({(p['model'], p['scale'], p['n'], p['k']) for p in D['points']})
ALL_M = [1,2,4,8,16,24,32,48,64,96,128,192,256,384,512,768,1024,1536,2048,3072,4096]
POW2 = [1,2,4,8,16,32,64,128,256,512,1024,2048,4096]

def carries(c): return not (c.startswith('cublaslt/') and c != 'cublaslt/heuristic')

def probe_set(shape, m, top):
    p = pts[shape + (m,)]
    out = []
    for b, c in p['cand'][:top]:
        k = b+'/'+c
        if k not in out: out.append(k)
    for b, c in p['probe']:
        k = b+'/'+c
        if k not in out: out.append(k)
    if p['heur']:
        k = '/'.join(p['heur'])
        if k not in out: out.append(k)
    return out

def weight(c, m, lo, hi):
    t = tiles.get(c, 0)
    if t > 0:
        T = lambda x: (x + t - 1)//t
        if T(hi) > T(lo): return (T(m)-T(lo))/(T(hi)-T(lo))
    return (m-lo)/(hi-lo)

def route_current(rec, m, lo, hi, M):
    # rec: {m: {cfg: us}}; M: supported-at-m set
    a, b = rec[lo], rec[hi]
    sc = sorted(((1-weight(c,m,lo,hi))*a[c] + weight(c,m,lo,hi)*b[c], c) for c in a if c in b and carries(c))
    order = [c for _, c in sc] + [c for _, c in sorted((u, c) for c, u in b.items()) if c not in [x for _, x in sc]]
    for c in order:
        if c in M: return c
    return None

def route_minmax(rec, m, lo, hi, M, mix=0.0):
    # rank configs measured at both ends by max(rel_lo, rel_hi) (relative to each end's best), ties by interp
    a, b = rec[lo], rec[hi]
    ba, bb = min(a.values()), min(b.values())
    sc = []
    for c in a:
        if c in b and carries(c):
            w = weight(c, m, lo, hi)
            interp = (1-w)*a[c] + w*b[c]
            regret = max(a[c]/ba, b[c]/bb)
            sc.append((regret, interp, c))
    sc.sort()
    order = [c for *_, c in sc] + [c for _, c in sorted((u, c) for c, u in b.items()) if c not in [x for *_, x in sc]]
    for c in order:
        if c in M: return c
    return None

def route_interp_rel(rec, m, lo, hi, M):
    # interpolate each config's relative standing (time / best at that end) at the weight; rank by it
    a, b = rec[lo], rec[hi]
    ba, bb = min(a.values()), min(b.values())
    sc = []
    for c in a:
        if c in b and carries(c):
            w = (m-lo)/(hi-lo)
            sc.append(((1-w)*a[c]/ba + w*b[c]/bb, c))
    sc.sort()
    order = [c for _, c in sc] + [c for _, c in sorted((u, c) for c, u in b.items()) if c not in [x for _, x in sc]]
    for c in order:
        if c in M: return c

def route_noheur(rec, m, lo, hi, M):
    # current rule but cublaslt/heuristic interpolated only if it is the fastest at both ends
    a, b = rec[lo], rec[hi]
    ba, bb = min(a, key=a.get), min(b, key=b.get)
    def ok(c):
        if not carries(c): return False
        if c == 'cublaslt/heuristic': return ba == c and bb == c
        return True
    sc = sorted(((1-weight(c,m,lo,hi))*a[c] + weight(c,m,lo,hi)*b[c], c) for c in a if c in b and ok(c))
    order = [c for _, c in sc] + [c for _, c in sorted((u, c) for c, u in b.items()) if c not in [x for _, x in sc]]
    for c in order:
        if c in M: return c

def simulate(grid, top, rule=route_current, neighbours=0, test_ms=None, verbose=False):
    res = []  # (shape, m, ratio, routed, best)
    timings = 0
    nshapes = 0
    for sh in shapes:
        model, s, n, k = sh
        sets = {m: probe_set(sh, m, top) for m in grid}
        if neighbours:
            # add the top-`neighbours` measured winners of adjacent grid points
            base = dict(sets)
            for i, m in enumerate(grid):
                extra = []
                for j in (i-1, i+1):
                    if 0 <= j < len(grid):
                        mm = grid[j]
                        t = meas[(s,n,k,mm)]
                        ranked = sorted((t[c], c) for c in base[mm] if c in t)
                        extra += [c for _, c in ranked[:neighbours]]
                for c in extra:
                    if c not in sets[m] and c in meas[(s,n,k,m)]: sets[m] = sets[m] + [c]
        rec = {}
        for m in grid:
            t = meas[(s,n,k,m)]
            rec[m] = {c: t[c] for c in sets[m] if c in t}
            timings += len(rec[m])
        nshapes += 1
        tm = test_ms if test_ms is not None else [x for x in ALL_M if x not in grid]
        for m in tm:
            if m < grid[0] or m > grid[-1] or m in grid: continue
            lo = max(g for g in grid if g < m); hi = min(g for g in grid if g > m)
            t = meas[(s,n,k,m)]
            c = rule(rec, m, lo, hi, t)
            best = min(t.values())
            res.append((sh, m, t[c]/best, c, min(t, key=t.get)))
    return res, timings/nshapes

def summary(name, res, cost):
    r = [x[2] for x in res]
    over5 = sum(x > 1.05 for x in r)
    gm = math.exp(sum(map(math.log, r))/len(r))
    worst = max(res, key=lambda x: x[2])
    print(f"{name:48s} pts {len(r):5d} over5% {over5:4d} ({100*over5/len(r):4.1f}%) over10% {sum(x>1.10 for x in r):4d} worst {worst[2]:.3f} geomean {100*(gm-1):.2f}% timings/shape {cost:.1f}")
    return over5, worst, gm

def bands(res):
    by = collections.defaultdict(list)
    for x in res: by[x[1]].append(x[2])
    for m in sorted(by):
        r = by[m]; gm = math.exp(sum(map(math.log, r))/len(r))
        print(f"   M={m:5d}: {len(r):4d} pts, over5% {sum(x>1.05 for x in r):4d}, worst {max(r):.3f}, geomean {100*(gm-1):.2f}%")

SMS=132
def n_tile(c):
    b, cfg = c.split('/')
    mm = re.search(r'_(\d+)x(\d+)x(\d+)_', cfg)
    if mm: return int(mm.group(1)) if 'swapab' in cfg else int(mm.group(2))
    mm = re.match(r'(?:m\d+_)?n(\d+)_', cfg)
    if mm and b in ('wgmma','decode'): return int(mm.group(1))
    return 0
def make_weight(mode, backends=('cutlass_sm90',), streamk_linear=False):
    def w(c, m, lo, hi, n):
        t = tiles.get(c, 0); nt = n_tile(c)
        b = c.split('/')[0]
        if t > 0 and nt > 0 and b in backends:
            ct = lambda x: ((x + t - 1)//t) * ((n + nt - 1)//nt)
            if streamk_linear and 'streamk' in c:
                W = lambda x: ct(x)/SMS
            else:
                W = lambda x: (ct(x) + SMS - 1)//SMS
            if W(hi) > W(lo): return (W(m)-W(lo))/(W(hi)-W(lo))
            if mode == 'flat': return 0.5
        return weight(c, m, lo, hi)
    return w
def rule_with(wf):
    def r(rec, m, lo, hi, M, n):
        a, b = rec[lo], rec[hi]
        sc = sorted(((1-wf(c,m,lo,hi,n))*a[c] + wf(c,m,lo,hi,n)*b[c], c) for c in a if c in b and carries(c))
        order = [c for _, c in sc] + [c for _, c in sorted((u, c) for c, u in b.items()) if c not in [x for _, x in sc]]
        for c in order:
            if c in M: return c
    return r


def oracle_both(rec, m, lo, hi, M):
    """The best config measured at both neighbours (what a perfect between-M rule could pick)."""
    both = [c for c in rec[lo] if c in rec[hi] and c in M]
    return min(both, key=lambda c: M[c]) if both else route_current(rec, m, lo, hi, M)

def oracle_any(rec, m, lo, hi, M):
    """The best config timed at either neighbour."""
    return min((c for c in set(rec[lo]) | set(rec[hi]) if c in M), key=lambda c: M[c])

def simulate_n(grid, top, rule, test_ms=None):
    """simulate() for rules that also take N (wave counts)."""
    res = []; timings = 0
    for sh in shapes:
        model, s, n, k = sh
        rec = {m: {c: meas[(s,n,k,m)][c] for c in probe_set(sh, m, top) if c in meas[(s,n,k,m)]} for m in grid}
        timings += sum(len(v) for v in rec.values())
        for m in (test_ms or [x for x in ALL_M if x not in grid]):
            if m < grid[0] or m > grid[-1] or m in grid: continue
            lo = max(g for g in grid if g < m); hi = min(g for g in grid if g > m)
            t = meas[(s,n,k,m)]
            c = rule(rec, m, lo, hi, t, n)
            res.append((sh, m, t[c]/min(t.values()), c, min(t, key=t.get)))
    return res, timings/len(shapes)

def hybrid(maxw):
    """CUTLASS configs interpolated in waves (ceil(tiles / SMs)) while the upper M needs at most maxw waves."""
    def w(c, m, lo, hi, n):
        t = tiles.get(c, 0); nt = n_tile(c)
        if t > 0 and nt > 0 and c.startswith('cutlass_sm90/'):
            ct = lambda x: ((x + t - 1)//t) * ((n + nt - 1)//nt)
            W = lambda x: (ct(x) + SMS - 1)//SMS
            if W(hi) > W(lo) and W(hi) <= maxw: return (W(m)-W(lo))/(W(hi)-W(lo))
        return weight(c, m, lo, hi)
    return w

if __name__ == '__main__':
    POW4 = [1, 4, 16, 64, 256, 1024, 4096]
    EVERY2 = ALL_M[::2]
    T = [24, 48, 96, 192, 384, 768, 1536, 3072]
    print(f"{len(shapes)} (model, shape, scale kind) held out; timings/shape = the probe's cost")
    res, c = simulate(POW2, 5)
    agree = sum(pts[sh + (m,)]['routed'] == cfg.split('/', 1) for sh, m, r, cfg, b in res)
    print(f"current rule agrees with the C++ router's choice at {agree} of {len(res)} points")
    summary('pow2 (13 M) top5, current rule', res, c); bands(res)
    print('grid density (current rule, top 5):')
    for name, g in [('pow4 (7 M)', POW4), ('every other of the 21 (11 M)', EVERY2), ('pow2 (13 M)', POW2)]:
        res, c = simulate(g, 5); summary(f'  {name} all between', res, c)
        res, c = simulate(g, 5, test_ms=T); summary(f'  {name} at 24..3072', res, c)
    print('candidates (pow2 grid):')
    for top in [5, 8, 12]:
        for nb in [0, 1, 2]:
            for rule in [route_current, oracle_both, oracle_any]:
                res, c = simulate(POW2, top, rule, neighbours=nb)
                summary(f'  top{top} +{nb} neighbour winners {rule.__name__}', res, c)
    res, c = simulate(POW2, 5)
    miss = [x for x in res if x[2] > 1.05]
    print(f"  current misses whose best at M is a cuBLASLt rank (heuristic1..3, not routable between M): "
          f"{sum(x[4].startswith('cublaslt/heuristic') and x[4] != 'cublaslt/heuristic' for x in miss)} of {len(miss)}")
    print('between-M rules (pow2 grid, top 5):')
    for rule in [route_current, route_minmax, route_interp_rel, route_noheur]:
        res, c = simulate(POW2, 5, rule); summary(f'  {rule.__name__}', res, c)
    for name, wf in [('waves (CUTLASS)', make_weight('lin')), ('waves, stream-K linear in tiles', make_weight('lin', streamk_linear=True)),
                     ('waves while <= 2 waves', hybrid(2))]:
        res, c = simulate_n(POW2, 5, rule_with(wf)); summary(f'  {name}', res, c)
