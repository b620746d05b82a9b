#!/usr/bin/env python3
"""Would a routing policy that avoids stream-K (or unstable) configs reduce the 3% misses?

CPU only, standard library only. Reads the recorded files of this folder and of ../2026-11-30-tune-h200/:

  python3 bench/results/2026-11-30-routed-h200/streamk_policy_eval.py > .../streamk_policy_eval.txt

Ground truth: `fp8route bench --configs all` JSON. A problem is (scale, out, N, K, M); the best single
backend is the min over the problem's `routed: false` records.

IMPORTANT limitation of the bench JSON: it holds ONE `routed: false` record per backend (that backend at its
fastest config in the run), not one per config. So a policy's pick (backend, config) has an explicit bench
time only when it is its backend's fastest config in that bench (status "exact"). Otherwise only bounds exist:
  lb  = that backend's fastest bench time: a true lower bound (the pick was timed in the run and lost to it);
  est = "rout": the routed record's time, when the routed call ran this very config (a bench time of it, but
        through the routed entry point, which has its own noise: see streamk_routed_vs_explicit.txt);
        "scal": max(lb, lb * tune(pick) / tune(backend's bench-fastest config)), i.e. the tune's ratio between
        two configs of one backend assumed to carry over to the bench (a model; least reliable for stream-K,
        and it can never put a tune-faster pick above lb).
Every policy row therefore shows misses / worst / geomean twice: with lb (a hard floor on misses) and with est.
Under est, policy 1 is charged the routed call's noise where its config lost its backend's race ("rout")
while a policy that picks another config is not; differences of 1-2 problems are within that bias.

Tune data per bench (bench/results/2026-11-30-tune-h200/README.md, routes/ history):
  TP 8 benches: table of f4305b9 = tune_tp8_flush.raw.jsonl.gz for every TP 8 problem.
  TP 1 bench:   table of 9122754 = tune_tp1_flush + tune_tp8_flush, a point measured in both keeping its min
                (bench/routing_records.py); 30 (N, K, M, scale) problems are shared between TP 1 and TP 8.
Ranking as in src/route/table.cpp / router.cpp (exact M): fastest `us` (median of the tune's replays, rounded to
4 decimals as the table stores it) first, ties by (backend, config) name order. The raw lines also carry min_us
and max_us of the replays; "spread" below is (max_us - min_us) / us. Stream-K (SK) = "streamk" in the config name.
"""
import collections
import gzip
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
TUNE = os.path.join(HERE, "..", "2026-11-30-tune-h200")
MISS = 1.03


def is_sk(cfg):
    return "streamk" in cfg[1]


def band(m):
    return "decode" if m <= 16 else ("middle" if m <= 512 else "prefill")


BANDS = ("decode", "middle", "prefill")


def load_tune(names):
    """problem -> {(backend, config): (us, min_us, max_us)}; a point in several files keeps its min us."""
    cand = collections.defaultdict(dict)
    for name in names:
        with gzip.open(os.path.join(TUNE, name), "rt") as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                if "backend" not in r:
                    continue
                p = (r["scale"], r["out"], r["n"], r["k"], r["m"])
                c = (r["backend"], r["config"])
                v = (r["us"], r["min_us"], r["max_us"])
                if c not in cand[p] or v[0] < cand[p][c][0]:
                    cand[p][c] = v
    return cand


def load_bench(name):
    with gzip.open(os.path.join(HERE, name), "rt") as f:
        recs = json.load(f)
    probs = {}
    for r in recs:
        p = (r["scale"], r["out"], r["n"], r["k"], r["m"])
        d = probs.setdefault(p, {"routed": None, "alone": {}, "label": f"{r['model']}/{r['layer']} tp{r['tp']}"})
        if r["routed"]:
            d["routed"] = ((r["backend"], r["config"]), r["us"])
        else:
            assert r["backend"] not in d["alone"], (name, p, r["backend"])
            d["alone"][r["backend"]] = (r["config"], r["us"])
    for d in probs.values():
        d["best"] = min(us for _, us in d["alone"].values())
    return probs


# ---------------------------------------------------------------- policies (tune data -> one pick)

def ranked(cand, key=lambda c, v: round(v[0], 4)):
    # Times rounded to 4 decimals as bench/routing_records.py writes them into the table; ties in name order.
    return sorted(cand, key=lambda c: (key(c, cand[c]), c))


def spread(v):
    return (v[2] - v[1]) / v[0]


def p_tune_best(cand):
    return ranked(cand)[0]


def p_non_sk(cand):
    r = [c for c in ranked(cand) if not is_sk(c)]
    return r[0] if r else ranked(cand)[0]


def p_margin(x):
    def pick(cand):
        best = ranked(cand)[0]
        if not is_sk(best):
            return best
        ns = [c for c in ranked(cand) if not is_sk(c)]
        if not ns:
            return best
        return best if cand[ns[0]][0] > cand[best][0] * (1 + x / 100) else ns[0]
    return pick


def p_stable_within(x):
    """Among configs within x% of the tune best (by median), the one with the smallest (max-min)/median."""
    def pick(cand):
        t0 = cand[ranked(cand)[0]][0]
        near = [c for c in cand if cand[c][0] <= t0 * (1 + x / 100)]
        return min(near, key=lambda c: ((cand[c][2] - cand[c][1]) / cand[c][0], cand[c][0], c))
    return pick


def p_by_max(cand):
    return ranked(cand, key=lambda c, v: v[2])[0]


def p_fast_pass(x):
    """Within x% of the tune best, prefer non-SK; among non-SK prefer the smallest spread."""
    def pick(cand):
        t0 = cand[ranked(cand)[0]][0]
        near = [c for c in cand if cand[c][0] <= t0 * (1 + x / 100) and not is_sk(c)]
        if not near:
            return ranked(cand)[0]
        return min(near, key=lambda c: ((cand[c][2] - cand[c][1]) / cand[c][0], cand[c][0], c))
    return pick


def p_spread_gate(s, y):
    """Tune-best, unless its replay spread (max-min)/median is >= s: then the fastest config with spread < s,
    if that one is within y% of the tune best."""
    def pick(cand):
        best = ranked(cand)[0]
        if spread(cand[best]) < s / 100:
            return best
        calm = [c for c in ranked(cand) if spread(cand[c]) < s / 100]
        return calm[0] if calm and cand[calm[0]][0] <= cand[best][0] * (1 + y / 100) else best
    return pick


POLICIES = [
    ("2  tune-best", p_tune_best),
    ("3  tune-best non-SK only", p_non_sk),
] + [(f"4  SK only if >{x}% ahead", p_margin(x)) for x in (1, 2, 3, 5, 8, 10)] + [
    ("5a min spread within 1%", p_stable_within(1)),
    ("5b min spread within 2%", p_stable_within(2)),
    ("5c rank by max_us", p_by_max),
    ("5d non-SK min spread w/in 3%", p_fast_pass(3)),
] + [(f"5e spread>=10%: calm w/in {y}%", p_spread_gate(10, y)) for y in (3, 5, 10)]


# ---------------------------------------------------------------- evaluation

def bench_time(d, cand, pick):
    """(status, lb, est) for a pick on a bench problem; None when its backend has no record there."""
    b, c = pick
    if b not in d["alone"]:
        return None
    bc, bus = d["alone"][b]
    if bc == c:
        return ("exact", bus, bus)
    if d["routed"][0] == pick:  # the routed call ran this very config: its time is a bench time of it
        return ("rout", bus, max(bus, d["routed"][1]))
    est = bus
    if (b, bc) in cand and pick in cand:
        est = max(bus, bus * cand[pick][0] / cand[(b, bc)][0])
    return ("scal", bus, est)


def gmean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summarize(ratios):
    return (sum(r > MISS for r in ratios), max(ratios), gmean(ratios))


def evaluate(probs, tune, pickf):
    """per problem: (pick, status, ratio_lb, ratio_est, t_lb, t_est)."""
    out = {}
    for p, d in probs.items():
        if p not in tune:
            continue
        pick = pickf(tune[p]) if pickf else d["routed"][0]
        bt = bench_time(d, tune[p], pick)
        if bt is None:
            continue
        st, lb, est = bt
        out[p] = (pick, st, lb / d["best"], est / d["best"], lb, est)
    return out


def fmt_row(name, res, common):
    rl = [res[p][2] for p in common]
    re = [res[p][3] for p in common]
    nun = sum(res[p][1] != "exact" for p in common)
    nsk = sum(is_sk(res[p][0]) for p in common)
    ml, wl, gl = summarize(rl)
    me, we, ge = summarize(re)
    return (f"{name:<30} {nsk:5d} {nun:6d}   {ml:3d}  {wl:6.3f}  {gl:6.4f}   {me:3d}  {we:6.3f}  {ge:6.4f}")


HDR = (f"{'policy':<30} {'SKpk':>5} {'unobs':>6}   {'lb: miss  worst   geomean':<25}  {'est: miss worst   geomean'}")


def band_speedups(probs, common, times):
    """geomean of cuBLASLt-alone / time per band, over problems where cuBLASLt ran."""
    out = {}
    for bd in BANDS:
        xs = [probs[p]["alone"]["cublaslt"][1] / times[p] for p in common
              if band(p[4]) == bd and "cublaslt" in probs[p]["alone"]]
        out[bd] = (gmean(xs), len(xs))
    return out


def band_ratios(common, res, idx):
    return {bd: gmean([res[p][idx] for p in common if band(p[4]) == bd]) for bd in BANDS}


def run(title, bench_name, tune_names, table_note, detail=True):
    probs = load_bench(bench_name)
    tune = load_tune(tune_names)
    print("=" * 110)
    print(f"{title}: {bench_name}  ({len(probs)} problems)   tune: {' + '.join(tune_names)}  [{table_note}]")
    missing = [p for p in probs if p not in tune]
    print(f"problems without tune data: {len(missing)}" + (f" {missing}" if missing else ""))
    common = [p for p in probs if p in tune]

    # How well the tune ranking reproduces the table the routed call used.
    same = sum(p_tune_best(tune[p]) == probs[p]["routed"][0] for p in common)
    print(f"tune-best (policy 2) == routed record's config: {same} of {len(common)}")
    diff = [p for p in common if p_tune_best(tune[p]) != probs[p]["routed"][0]]
    for p in diff[:10]:
        print(f"   differs: {p} routed {probs[p]['routed'][0]} tune-best {p_tune_best(tune[p])}")

    # Policy 1 (shipped): routed record's own time, and the explicit (routed:false) time of its config.
    res1 = evaluate(probs, tune, None)
    routed_ratio = {p: probs[p]["routed"][1] / probs[p]["best"] for p in common}
    allres = {"1  shipped (explicit time)": res1}
    for name, f in POLICIES:
        allres[name] = evaluate(probs, tune, f)
    common = [p for p in common if all(p in r for r in allres.values())]
    print(f"evaluated problems: {len(common)}")
    print()
    print("misses = problems > 3% slower than the best single backend (min of routed:false records);")
    print("SKpk = picks that are stream-K configs; unobs = picks that are not their backend's fastest config in")
    print("this bench (no explicit time of their own: lb = backend's fastest time; est = the routed record's time")
    print("if the routed call ran that config, else lb scaled by the tune ratio; see the header)")
    print()
    print(HDR)
    rr = [routed_ratio[p] for p in common]
    m, w, g = summarize(rr)
    nsk = sum(is_sk(probs[p]["routed"][0]) for p in common)
    print(f"{'1  shipped (routed record)':<30} {nsk:5d} {'-':>6}   {m:3d}  {w:6.3f}  {g:6.4f}   (measured: the routed call itself)")
    for name, res in allres.items():
        print(fmt_row(name, res, common))

    # Band view: geomean ratio to best per band for every policy (est), and how it compares to policy 1.
    print()
    print("geomean ratio to best single backend per M band (est; lb in brackets where different)")
    print(f"{'policy':<30} " + "  ".join(f"{bd:>17}" for bd in BANDS))
    rb = {bd: gmean([routed_ratio[p] for p in common if band(p[4]) == bd]) for bd in BANDS}
    print(f"{'1  shipped (routed record)':<30} " + "  ".join(f"{rb[bd]:>17.4f}" for bd in BANDS))
    for name, res in allres.items():
        be, bl = band_ratios(common, res, 3), band_ratios(common, res, 2)
        cells = [f"{be[bd]:.4f}" + (f" [{bl[bd]:.4f}]" if abs(be[bd] - bl[bd]) > 5e-5 else "") for bd in BANDS]
        print(f"{name:<30} " + "  ".join(f"{c:>17}" for c in cells))
    print("misses per band (est), decode/middle/prefill:")
    for name, res in allres.items():
        print(f"  {name:<30} " + "/".join(str(sum(res[p][3] > MISS for p in common if band(p[4]) == bd)) for bd in BANDS))

    # Against policy 1 under the same bench-time model: which problems each policy fixes / breaks.
    print()
    print("change against policy 1 under the same bench-time model (est): fixed = P1 > 3% and policy <= 3%,")
    print("broken = P1 <= 3% and policy > 3%; picks changed = problems where the pick differs from P1's")
    base = allres["1  shipped (explicit time)"]
    for name, res in allres.items():
        if name.startswith("1"):
            continue
        fixed = [p for p in common if base[p][3] > MISS >= res[p][3]]
        broken = [p for p in common if base[p][3] <= MISS < res[p][3]]
        hard = [p for p in broken if res[p][2] > MISS]
        changed = sum(res[p][0] != base[p][0] for p in common)
        print(f"  {name:<30} picks changed {changed:3d}  fixed {len(fixed):2d}  broken {len(broken):3d}"
              f" (of which {len(hard)} > 3% even by lb)")
        if len(fixed) + len(broken) <= 8:
            for p in fixed:
                print(f"      fixed  {probs[p]['label']} {p[0]} M={p[4]}: {base[p][0][1]} {base[p][3]:.3f}x ({base[p][1]}) -> "
                      f"{res[p][0][1]} {res[p][3]:.3f}x ({res[p][1]})")
            for p in broken:
                print(f"      broken {probs[p]['label']} {p[0]} M={p[4]}: {base[p][0][1]} {base[p][3]:.3f}x ({base[p][1]}) -> "
                      f"{res[p][0][1]} {res[p][3]:.3f}x ({res[p][1]})")

    # The routed call's own misses, by what the explicit timings say about them.
    print()
    print("policy 1 misses of the routed call (routed record > 3% over best), by cause:")
    for p in sorted((p for p in common if routed_ratio[p] > MISS), key=lambda p: probs[p]["label"]):
        d = probs[p]
        (b, c), rus = d["routed"]
        bc, bus = d["alone"][b]
        winner = min(d["alone"].items(), key=lambda kv: kv[1][1])
        if bc == c:
            why = f"routed-vs-explicit: the explicit call of the same config was {bus / d['best']:.3f}x"
        else:
            why = (f"the routed config was not {b}'s fastest in the bench ({bc} {bus / d['best']:.3f}x);"
                   f" explicit time of the routed config unknown")
        print(f"  {d['label']} {p[0]} M={p[4]}: routed {c} {routed_ratio[p]:.3f}x [{'SK' if is_sk((b, c)) else 'non-SK'}];"
              f" best {winner[0]}:{winner[1][0]} [{'SK' if is_sk((winner[0], winner[1][0])) else 'non-SK'}]")
        print(f"      {why}; tune spread of routed config {100 * spread(tune[p][(b, c)]):.1f}%")

    # Is the tune's replay spread of the routed config a predictor of the routed call missing?
    if same != len(common):
        return probs, tune, allres, routed_ratio, common
    print()
    print("routed-call misses by the tune's replay spread (max-min)/median of the routed config:")
    cells = collections.defaultdict(lambda: [0, 0])
    for p in common:
        c = probs[p]["routed"][0]
        sp = spread(tune[p][c])
        k = ("SK" if is_sk(c) else "non-SK", "<5%" if sp < 0.05 else ("5-10%" if sp < 0.10 else ">=10%"))
        cells[k][0] += 1
        cells[k][1] += routed_ratio[p] > MISS
    for k in sorted(cells):
        print(f"  {k[0]:<7} spread {k[1]:<6} problems {cells[k][0]:4d}  routed misses {cells[k][1]:3d}")

    if not detail:
        return probs, tune, allres, routed_ratio, common

    # Problem-by-problem changes: where a policy's pick differs from policy 1 and either side misses.
    print()
    print("problems where the routed record, policy 1 (est), 4 (1%) or 5a misses (est); policy 3's pick shown too:")
    keys = ["1  shipped (explicit time)", "3  tune-best non-SK only", "4  SK only if >1% ahead",
            "5a min spread within 1%"]
    rows = [p for p in common if routed_ratio[p] > MISS or any(allres[k][p][3] > MISS for k in keys if k[0] != "3")]
    for p in sorted(rows, key=lambda p: (probs[p]["label"], p)):
        d = probs[p]
        print(f"  {d['label']} {p[0]} M={p[4]} N={p[2]} K={p[3]}  best {d['best']:.2f} us")
        print(f"     routed rec  {d['routed'][0][1]:<48} {d['routed'][1]:9.2f}  {routed_ratio[p]:.3f}x")
        for k in keys:
            pick, st, rl, re, tl, te = allres[k][p]
            tn = tune[p]
            tb = tune[p][p_tune_best(tn)][0]
            spr = (tn[pick][2] - tn[pick][1]) / tn[pick][0]
            print(f"     {k[:2].strip():<3}{k[2:20]:<18} {pick[1]:<40} {st:5} lb {rl:.3f}x est {re:.3f}x"
                  f"  tune +{100 * (tn[pick][0] / tb - 1):.1f}% spread {100 * spr:.1f}%")
        alone = ", ".join(f"{b}:{c} {us:.2f}" for b, (c, us) in sorted(d["alone"].items()))
        print(f"     bench alone: {alone}")
    return probs, tune, allres, routed_ratio, common


def speedups(title, probs, common, allres, routed_ratio, best_name):
    print()
    print(f"{title}: speed-up over cuBLASLt alone, geomean (cuBLASLt-alone us / policy us), decode / middle / prefill,")
    print("problems where cuBLASLt runs; an (lb) row uses lower-bound times, so it is an upper bound of the speed-up")
    rows = [("1 routed record", {p: probs[p]["routed"][1] for p in common}),
            ("1 explicit (est)", {p: allres["1  shipped (explicit time)"][p][5] for p in common}),
            (f"{best_name.strip()[:22]} (est)", {p: allres[best_name][p][5] for p in common}),
            (f"{best_name.strip()[:22]} (lb)", {p: allres[best_name][p][4] for p in common}),
            ("3 non-SK only (est)", {p: allres["3  tune-best non-SK only"][p][5] for p in common}),
            ("3 non-SK only (lb)", {p: allres["3  tune-best non-SK only"][p][4] for p in common})]
    for scale in ("all", "row", "block", "tensor"):
        cs = [p for p in common if scale == "all" or p[0] == scale]
        line = []
        for name, t in rows:
            s = band_speedups(probs, cs, t)
            line.append(f"{name:<28} " + " / ".join(f"{s[bd][0]:.3f}x" for bd in BANDS))
        n = band_speedups(probs, cs, rows[0][1])
        print(f"  {scale:<6} (n = {'/'.join(str(n[bd][1]) for bd in BANDS)})")
        for l in line:
            print("     " + l)


def main():
    print(__doc__)
    BEST = "4  SK only if >1% ahead"
    r8 = run("TP 8", "bench_tp8_105a618.json.gz", ["tune_tp8_flush.raw.jsonl.gz"], "table of f4305b9")
    speedups("TP 8", r8[0], r8[4], r8[2], r8[3], BEST)
    r1 = run("TP 1", "bench_tp1_retuned.json.gz", ["tune_tp1_flush.raw.jsonl.gz", "tune_tp8_flush.raw.jsonl.gz"],
             "table of 9122754")
    speedups("TP 1", r1[0], r1[4], r1[2], r1[3], BEST)
    print()
    print("#" * 110)
    print("Supplementary: the same tune_tp8_flush policies scored on the two other TP 8 `--configs all` benches")
    print("(bench_tp8_retuned: run right after that very tune, table = that tune; bench_tp8_shipped: table of the")
    print("first tune, so its 'policy 1' rows are a different table). Only the summary tables are printed.")
    run("TP 8 (retuned bench)", "bench_tp8_retuned.json.gz", ["tune_tp8_flush.raw.jsonl.gz"], "table = this tune",
        detail=False)
    run("TP 8 (shipped bench)", "bench_tp8_shipped.json.gz", ["tune_tp8_flush.raw.jsonl.gz"],
        "table of c6b799e: first tune", detail=False)


if __name__ == "__main__":
    main()
