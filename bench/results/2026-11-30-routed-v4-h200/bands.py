#!/usr/bin/env python3
"""Routed vs the best single backend and vs cuBLASLt alone, for this folder's benches (every model,
4 graph instances, --configs all, --screen 25, the shipped table of this session's rebuild, on the
GPU the fill-in tune ran on). Run from the repository root:
    python3 bench/results/2026-11-30-routed-v4-h200/bands.py

1. The M this session's tune added (2, 8, 24, 48, 96, 192, 384, 768, 1536, 2048, 3072), TP 8 and TP 1.
   llama-3.1-405b at TP 1 has only qkv_proj and o_proj (the call's time limit cut the bench; its
   finished layers were kept by bench --json's per-layer rewrite).
2. Every catalog M up to 4096: set 1 with the previous session's benches of the M the table already
   measured (1, 4, 16, 32, ..., 1024, 4096; routed-v3 folder, the shipped table of df3e427, which
   routes those M as this table does: at a measured M the choice is that M's fastest, and this
   session's rebuild changed no measurement there). M bands as in the issue: decode M <= 16, middle
   32-512, prefill >= 1024; M = 24 and 768 lie between and are counted under "other".
3. llama-3.1-70b at TP 4, M = 128, 512, 1024, 4096: the table measured TP 4 only up to M = 64, so
   these are routed by the nearest TP 1 / TP 8 entries (the router change of b74f96c).
4. The same kernel timed twice in one run (routed call against that config's own timing; printed as "3.",
   by the previous session's function).
5. Set 1 again with the shipped table of this folder's README (routes/h200-measurements.json after the
   settle_final_round fix, 9ddcefe): its choice at each problem, timed by this bench where the bench
   has that config's time (as the routed call or as a backend's fastest). An ESTIMATE from the bench
   that found the bug, not a GPU run of the settled table.
6. The bug: in the fill-in tune's raw files, problems whose fastest recorded time belongs to a config
   the final round did not time again, and the bench's verdict on those problems.
"""
import collections, glob, importlib.util, json, os, sys, tarfile, tempfile

HERE = "bench/results/2026-11-30-routed-v4-h200"
V3 = "bench/results/2026-11-30-routed-v3-h200"
# The previous session's script (it loads routed-v2's from_json: one problem per (model, layer, tp, scale, m)).
spec = importlib.util.spec_from_file_location("bands_v3", f"{V3}/bands.py")
v3 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(v3)
from_json = v3.from_json
v2 = sys.modules[v3.report.__module__]  # routed-v2's bands module, which v3 loaded


def band(m):
    return "decode" if m <= 16 else "middle" if 32 <= m <= 512 else "prefill" if m >= 1024 else "other"


def report(name, probs):
    v2.report(name, probs, band=band, bands=("decode", "middle", "prefill", "other"))
    over = sum(d["routed"] > 1.03 * min(v for b, v in d.items() if b != "routed") for d in probs.values())
    print(f"  in all: {over} of {len(probs)} problems over 3%")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for folder, name in ((HERE, "bench_tp8_fill"), (HERE, "bench_tp1_fill"), (HERE, "bench_tp1_405b_large"),
                             (HERE, "bench_tp4_70b"), (V3, "bench_shipped"), (V3, "bench_tp1_m32up")):
            with tarfile.open(f"{folder}/{name}.json.tar.gz") as t:
                t.extractall(os.path.join(tmp, name))
        fill = {}
        for tp in (8, 1):
            probs = {}
            from_json(f"{tmp}/bench_tp{tp}_fill/json/*_tp{tp}.json", probs)
            if tp == 1:
                from_json(f"{tmp}/bench_tp1_405b_large/json/*.json", probs)
            report(f"1. added M, TP {tp}", probs)
            v3.misses(probs)
            fill[tp] = probs
        for tp in (8, 1):
            probs = v3.shipped(tmp, tp)
            probs.update(fill[tp])
            report(f"2. every catalog M <= 4096, TP {tp}", probs)
        probs = {}
        from_json(f"{tmp}/bench_tp4_70b/json/*.json", probs)
        report("3. llama-3.1-70b TP 4, M >= 128", probs)
        v3.misses(probs)
        v3.same_kernel(glob.glob(f"{tmp}/bench_tp*_fill/json/*.json") + glob.glob(f"{tmp}/bench_tp1_405b_large/json/*.json"))
        settled(tmp)
        unsettled_winners(tmp)


def settled(tmp):
    choice = {}
    for s, o, n, k, m, b, c, us in json.load(open("routes/h200-measurements.json")):
        if (s, o, n, k, m) not in choice or us < choice[(s, o, n, k, m)][0]:
            choice[(s, o, n, k, m)] = (us, b, c)
    for tp in (8, 1):
        count = collections.Counter()
        for f in glob.glob(f"{tmp}/bench_tp{tp}_fill/json/*.json") + \
                (glob.glob(f"{tmp}/bench_tp1_405b_large/json/*.json") if tp == 1 else []):
            probs = collections.defaultdict(dict)
            for r in json.load(open(f)):
                probs[(r["scale"], r["out"], r["n"], r["k"], r["m"])]["routed" if r["routed"] else r["backend"]] = (
                    r["us"], r["backend"], r["config"])
            for key, d in probs.items():
                best = min(v[0] for name, v in d.items() if name != "routed")
                _, b, c = choice[key]
                t = next((v[0] for v in d.values() if v[1:] == (b, c)), None)
                was = "miss" if d["routed"][0] > 1.03 * best else "ok"
                count[(was, "not timed" if t is None else "> 3%" if t > 1.03 * best else "within 3%")] += 1
        print(f"5. TP {tp}, (bench of the unsettled table, settled table's choice timed by the same bench): "
              + ", ".join(f"{a} -> {b}: {n}" for (a, b), n in sorted(count.items())))


def unsettled_winners(tmp):
    import gzip
    stale = set()
    n = 0
    for tp in (8, 1):
        problem = collections.defaultdict(list)
        for line in gzip.open(f"{HERE}/tune_tp{tp}_fill.raw.jsonl.gz", "rt"):
            r = json.loads(line)
            if "stamp" in r:
                continue
            key = (r["scale"], r["out"], r["n"], r["k"], r["m"])
            if not r.get("done"):
                problem[key].append(r)
                continue
            n += 1
            again = {tuple(c) for c in r.get("final", [])}
            win = min(problem.pop(key), key=lambda x: x["us"])
            if again and (win["backend"], win["config"]) not in again:
                stale.add(key)
    count = collections.Counter()
    for f in glob.glob(f"{tmp}/bench_tp*_fill/json/*.json") + glob.glob(f"{tmp}/bench_tp1_405b_large/json/*.json"):
        probs = collections.defaultdict(dict)
        for r in json.load(open(f)):
            probs[(r["scale"], r["out"], r["n"], r["k"], r["m"])]["routed" if r["routed"] else r["backend"]] = r["us"]
        for key, d in probs.items():
            best = min(v for name, v in d.items() if name != "routed")
            count[("won without the final round" if key in stale else "other",
                   "> 3%" if d["routed"] > 1.03 * best else "within 3%")] += 1
    print(f"6. {len(stale)} of {n} tuned problems (per TP degree) won by a config the final round did not time again; "
          "bench (per model and layer): " + ", ".join(f"{a}, {b}: {c}" for (a, b), c in sorted(count.items())))


if __name__ == "__main__":
    main()
